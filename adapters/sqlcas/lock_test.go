package sqlcas_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/internal/mysqltest"
)

const checkInterval = 200 * time.Millisecond

func TestLockerConformance(t *testing.T) {
	lockertest.Run(t, lockertest.Harness{
		NewLockers: func(t *testing.T, n int) []hybrid.Locker {
			cfg := mysqltest.Database(t)
			var out []hybrid.Locker
			for i := range n {
				// Each locker is a process of its own: its own pool.
				l, err := sqlcas.NewLocker(mysqltest.Open(t, cfg), sqlcas.LockerConfig{CheckInterval: checkInterval})
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					if err := l.CreateTokenCounter(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				t.Cleanup(func() { _ = l.Close() })
				out = append(out, l)
			}
			return out
		},
		TTL:    checkInterval,
		Renews: true,
		LoseLease: func(t *testing.T, g hybrid.Lease) {
			killSession(t, g.(*sqlcas.Lease))
		},
		NewStore: func(t *testing.T) cas.FencedStore { return newStore(t, sqlcas.MySQL, sqlcas.Config{}) },
	})
}

// killSession ends, from another connection, the session holding the
// lease's named lock (as a server restart or a dropped connection would).
func killSession(t *testing.T, le *sqlcas.Lease) {
	t.Helper()
	ctx := context.Background()
	db := mysqltest.Open(t, mysqltest.Config(t))
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, le.Name()).Scan(&id); err != nil || !id.Valid {
		t.Fatalf("holder of %s: %v, %v", le.Name(), id, err)
	}
	if _, err := db.ExecContext(ctx, `KILL ?`, id.Int64); err != nil {
		t.Fatal(err)
	}
}

// TestLockerConnectionDropped drops the lease's connection in the network
// (a fault proxy resets it): the server ends the session, which releases
// the named lock; the lease's check finds it lost and cancels its Context
// with hybrid.ErrLeaseLost; another locker gets the lock with a larger
// token, and the lost lease's release does not touch it.
func TestLockerConnectionDropped(t *testing.T) {
	ctx := context.Background()
	direct, viaProxy, p := proxied(t)
	l1, err := sqlcas.NewLocker(mysqltest.Open(t, viaProxy), sqlcas.LockerConfig{CheckInterval: checkInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	if err := l1.CreateTokenCounter(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := sqlcas.NewLocker(mysqltest.Open(t, direct), sqlcas.LockerConfig{CheckInterval: checkInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	g, err := l1.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if p.DropAll() == 0 {
		t.Fatal("no connection dropped")
	}
	select {
	case <-g.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the lease's Context is not cancelled after its connection was dropped")
	}
	if cause := context.Cause(g.Context()); !errors.Is(cause, hybrid.ErrLeaseLost) {
		t.Fatalf("cause %v, want hybrid.ErrLeaseLost", cause)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	next, err := l2.Acquire(wctx, "k") // the server ends the dropped session, and its lock
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= g.Token() {
		t.Fatalf("token %d after the lost lease's %d", next.Token(), g.Token())
	}
	if err := g.Release(ctx); err != nil && !errors.Is(err, hybrid.ErrLeaseLost) {
		t.Fatalf("release of the lost lease: %v", err)
	}
	if next.Context().Err() != nil {
		t.Fatal("the lost lease's release ended the new holder's lease")
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
