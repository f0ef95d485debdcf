package locks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/internal/zktest"
)

// TestMain fails the package if a grant's watch, a session or a waiter is
// left running. The embedded etcd's HTTP handlers wind down after Close
// returns.
func TestMain(m *testing.M) {
	etcdtest.VerifyTestMain(m)
}

// excludes checks a lock on real servers: a holder keeps a second client
// out until that client's context ends (when the lock honours contexts),
// a waiter gets the lock once it is released, and workers that each
// increment a plain counter under the lock lose no increment (the race
// detector would also see two holders). Worker w uses lockers[w %
// len(lockers)].
func excludes(t *testing.T, name string, honoursCtx bool, lockers ...Locker) {
	t.Helper()
	ctx := t.Context()
	other := lockers[1%len(lockers)]
	g, err := lockers[0].Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if honoursCtx {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		g2, err := other.Acquire(wctx, name)
		cancel()
		if err == nil {
			_ = g2.Release(ctx)
			t.Fatal("a second client got the lock while the first held it")
		}
	}
	got := make(chan error, 1)
	go func() {
		g2, err := other.Acquire(ctx, name)
		if err == nil {
			err = g2.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter did not get the released lock within 10 s")
	}

	const workers, each = 4, 10
	counter := 0
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range each {
				g, err := lockers[w%len(lockers)].Acquire(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				c := counter
				time.Sleep(time.Millisecond) // a lapse in exclusion loses this increment
				counter = c + 1
				if err := g.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if counter != workers*each {
		t.Fatalf("counter %d after %d increments under the lock", counter, workers*each)
	}
}

// lostWithin waits for g's loss and returns its cause.
func lostWithin(t *testing.T, g *Grant, d time.Duration) string {
	t.Helper()
	select {
	case <-g.Lost():
		return g.LostCause()
	case <-time.After(d):
		t.Fatalf("the grant was not lost within %v", d)
		return ""
	}
}

func TestLocal(t *testing.T) {
	excludes(t, "a", false, NewLocal([]string{"a"}))
	if _, err := NewLocal(nil).Acquire(t.Context(), "b"); err == nil {
		t.Error("a name the Local was not made with was locked")
	}
}

func TestLease(t *testing.T) {
	l := Lease(hybrid.NewLocalLocker(time.Minute))
	excludes(t, "k", true, l)
	g, err := l.Acquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if at, renewed := g.Expires(); !renewed || time.Until(at) < 50*time.Second || g.Token == 0 || g.Ref != fmt.Sprint(g.Token) {
		t.Errorf("grant: expires %v (%v), token %d, ref %q: want a local lease's expiry and token", at, renewed, g.Token, g.Ref)
	}
	if err := g.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lostWithin(t, g, time.Second), "released") {
		t.Errorf("a released lease's cause: %q", g.LostCause())
	}
}

// TestRedis checks the hand-written Redis lock: exclusion, the TTL on the
// key, a stale holder's release that deletes nothing, and the watchdog,
// which renews the key past its TTL and loses the grant when the key goes.
func TestRedis(t *testing.T) {
	cli := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := t.Context()
	l := &Redis{Client: cli, TTL: 10 * time.Second}
	excludes(t, prefix+"x", true, l)

	key := prefix + "stale"
	short := &Redis{Client: cli, TTL: 100 * time.Millisecond}
	g, err := short.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := cli.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 100*time.Millisecond {
		t.Errorf("lock TTL %v, want in (0, 100ms]", ttl)
	}
	if _, renewed := g.Expires(); renewed || g.Lost() != nil {
		t.Error("a lock without a watchdog says it renews or learns of its loss")
	}
	g2, err := l.Acquire(ctx, key) // waits for the expiry
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("release of an expired grant: %v, want ErrNotHeld", err)
	}
	if got := cli.Get(ctx, key).Val(); got != g2.Ref {
		t.Errorf("after a stale release the key holds %q, want the holder's %q", got, g2.Ref)
	}
	if err := g2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	key = prefix + "watched"
	w := &Redis{Client: cli, TTL: 300 * time.Millisecond, Watchdog: true}
	g, err = w.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := g.Expires()
	time.Sleep(700 * time.Millisecond)
	if got := cli.Get(ctx, key).Val(); got != g.Ref {
		t.Fatalf("after two TTLs the key holds %q, want the watched grant's %q", got, g.Ref)
	}
	if at, renewed := g.Expires(); !renewed || !at.After(first) {
		t.Errorf("expires %v (renewed %v), want later than the first %v", at, renewed, first)
	}
	cli.Del(ctx, key)
	if cause := lostWithin(t, g, 2*time.Second); !strings.Contains(cause, "gone") {
		t.Errorf("cause %q", cause)
	}
	if err := g.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("release of a lost grant: %v, want ErrNotHeld", err)
	}
}

// TestZooKeeper checks the lock recipe on sessions of their own (the
// lock's parent nodes created on the way), and a watched grant lost when
// its node is deleted.
func TestZooKeeper(t *testing.T) {
	srv := zktest.Start(t)
	dial := func(watch bool) *ZooKeeper {
		z, err := DialZooKeeper(srv.Addr, 10*time.Second, watch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(z.Close)
		return z
	}
	a, b := dial(false), dial(true)
	excludes(t, "/locks-test/x/y", true, a, b, dial(false), dial(false))

	g, err := b.Acquire(t.Context(), "/locks-test/x/y")
	if err != nil {
		t.Fatal(err)
	}
	if holder, err := a.Holder("/locks-test/x/y"); err != nil || holder != g.Ref || g.Token == 0 {
		t.Fatalf("holder %q (%v), want the grant's %q with a token (%d)", holder, err, g.Ref, g.Token)
	}
	if err := a.Conn().Delete(g.Ref, -1); err != nil {
		t.Fatal(err)
	}
	if cause := lostWithin(t, g, 5*time.Second); !strings.Contains(cause, "deleted") {
		t.Errorf("cause %q", cause)
	}
	if err := g.Release(t.Context()); err != nil {
		t.Errorf("release of a deleted node: %v", err)
	}
}

// TestEtcdMutex checks etcd's mutex, a session per client (per worker of
// excludes: two holders on one session would both hold the lock).
func TestEtcdMutex(t *testing.T) {
	cli := etcdtest.Start(t, etcdtest.Options{}).Client()
	var lockers []Locker
	for range 4 {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		lockers = append(lockers, EtcdMutex{Session: s})
	}
	excludes(t, "locks-test/m", true, lockers...)
}

// TestMySQL checks GET_LOCK: exclusion, the released connection back in
// the pool without the lock, and a kept-alive grant lost when its session
// is killed.
func TestMySQL(t *testing.T) {
	db := mysqltest.DB(t)
	ctx := t.Context()
	name := "locks-test:" + t.Name()
	excludes(t, name, true, &MySQL{DB: db, WaitStep: 50 * time.Millisecond})
	var holder sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, name).Scan(&holder); err != nil || holder.Valid {
		t.Errorf("after every release, IS_USED_LOCK = %v (%v), want NULL", holder.String, err)
	}

	g, err := (&MySQL{DB: db, KeepAlive: 50 * time.Millisecond}).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, name).Scan(&holder); err != nil || holder.String != g.Ref {
		t.Fatalf("IS_USED_LOCK = %v (%v), want the grant's session %s", holder.String, err, g.Ref)
	}
	if _, err := db.ExecContext(ctx, "KILL CONNECTION "+g.Ref); err != nil {
		t.Fatal(err)
	}
	if cause := lostWithin(t, g, 5*time.Second); !strings.Contains(cause, "session is gone") {
		t.Errorf("cause %q", cause)
	}
	if err := g.Release(ctx); err == nil {
		t.Error("the release of a killed session's lock succeeded")
	}
}
