//go:build unix

package rediscas_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/occ"
	"github.com/redis/go-redis/v9"
)

// pauseChildEnv, when set (to the key prefix to use), makes the test
// binary run as buyer A of TestProcessPause instead of running tests.
const pauseChildEnv = "OCCKIT_REDISCAS_PAUSE_CHILD"

// pauseTTL is the lock TTL of TestProcessPause.
const pauseTTL = time.Second

// TestProcessPause is the story with a real process pause. Stock 10. Buyer
// A is a child process (this test binary, re-run in a helper mode): it
// takes the lease, reads 10 and says so. The parent stops it with SIGSTOP
// for twice the TTL (its watchdog goroutine stops too, so the lock really
// expires in Redis), then, as buyer B, takes the lease with a larger token
// and writes 9 with hybrid.Update. It resumes A with SIGCONT and tells it to
// go on: A sends the fenced write it prepared before the pause, with its old
// token, and must be refused with ErrFenced; A then sells again through
// hybrid.Update with a fresh lease. Final stock 8 = initial - sales.
func TestProcessPause(t *testing.T) {
	cli := redistest.Client(t)
	prefix := redistest.Prefix(t)
	store, err := rediscas.New(cli, rediscas.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	lockerB, err := rediscas.NewLocker(cli, pauseLockerConfig(prefix))
	if err != nil {
		t.Fatal(err)
	}
	stock := cas.NewTyped(store, cas.JSON[int]())
	ctx := redistest.Ctx(t, 90*time.Second)
	if _, err := stock.CompareAndSwap(ctx, "stock", 0, 10); err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), pauseChildEnv+"="+prefix)
	var stderr bytes.Buffer
	child.Stderr = &stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- child.Wait()
	}()
	defer func() {
		// Whatever happened, leave no child behind (a stopped one too).
		_ = child.Process.Signal(syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("child stderr:\n%s", stderr.String())
		}
	}()
	next := func(prefix string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited before saying %q", prefix)
			}
			if !strings.HasPrefix(l, prefix) {
				t.Fatalf("child said %q, want %q...", l, prefix)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("child did not say %q within 30s", prefix)
		}
		return ""
	}

	var read, version int
	var tokenA uint64
	if _, err := fmt.Sscanf(next("READ "), "READ %d %d %d", &read, &version, &tokenA); err != nil || read != 10 {
		t.Fatalf("child's read: %d, %v; want 10", read, err)
	}
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * pauseTTL)
	lockGone := cli.Exists(ctx, lockerB.LockKey("stock")).Val() == 0

	// Buyer B sells while A is stopped.
	var tokenB uint64
	tokenLocker := lockerFunc(func(ctx context.Context, key string) (hybrid.Lease, error) {
		g, err := lockerB.Acquire(ctx, key)
		if err == nil {
			tokenB = g.Token()
		}
		return g, err
	})
	if _, _, err := hybrid.Update(ctx, tokenLocker, stock, "stock", sell); err != nil {
		t.Fatalf("buyer B: %v", err)
	}
	mid, _, _ := stock.Get(ctx, "stock")

	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "GO\n"); err != nil {
		t.Fatal(err)
	}
	write := next("WRITE ")
	lost := next("LEASE ")
	var left, sales, attempts int
	if _, err := fmt.Sscanf(next("SOLD "), "SOLD %d sales=%d attempts=%d", &left, &sales, &attempts); err != nil {
		t.Fatalf("child's report: %v", err)
	}
	next("DONE")
	stdin.Close()
	if err := <-exited; err != nil {
		t.Fatalf("child: %v", err)
	}
	exited <- nil // for the deferred cleanup

	final, _, err := stock.Get(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("redis, real process pause: A (token %d) read 10 and was stopped %v (lock expired in Redis: %v); "+
		"B (token %d) sold: stock %d; A resumed: %s; %s; A then sold with %d attempt(s); A reported %d sale(s); final stock %d",
		tokenA, 2*pauseTTL, lockGone, tokenB, mid, write, lost, attempts, sales, final)
	if !lockGone {
		t.Errorf("A's lock was still in Redis after A was stopped for twice its TTL")
	}
	if tokenB <= tokenA {
		t.Errorf("B's token %d not above A's %d", tokenB, tokenA)
	}
	if mid != 9 {
		t.Errorf("after B's sale the stock is %d, want 9", mid)
	}
	if !strings.HasPrefix(write, "WRITE fenced") {
		t.Errorf("A's late write with its old token: %q, want it refused with ErrFenced", write)
	}
	if final != 8 || left != 8 {
		t.Errorf("final stock %d (A wrote %d), want 8", final, left)
	}
	if remaining := 10 - (1 + sales); final != remaining {
		t.Errorf("final stock %d, but initial 10 - (B's 1 + A's %d reported sales) = %d", final, sales, remaining)
	}
}

func pauseLockerConfig(prefix string) rediscas.LockerConfig {
	return rediscas.LockerConfig{Prefix: prefix + "lock:", TTL: pauseTTL}
}

type lockerFunc func(ctx context.Context, key string) (hybrid.Lease, error)

func (f lockerFunc) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	return f(ctx, key)
}

// pauseChild is buyer A of TestProcessPause, run in the child process. It
// reports on stdout, one line per step, and returns the exit code.
func pauseChild() int {
	fail := func(step string, err error) int {
		fmt.Fprintf(os.Stderr, "child: %s: %v\n", step, err)
		return 1
	}
	prefix := os.Getenv(pauseChildEnv)
	opt, err := redis.ParseURL(os.Getenv(redistest.EnvURL))
	if err != nil {
		return fail("parse URL", err)
	}
	cli := redis.NewClient(opt)
	defer cli.Close()
	store, err := rediscas.New(cli, rediscas.Config{Prefix: prefix})
	if err != nil {
		return fail("store", err)
	}
	locker, err := rediscas.NewLocker(cli, pauseLockerConfig(prefix))
	if err != nil {
		return fail("locker", err)
	}
	stock := cas.NewTyped(store, cas.JSON[int]())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	lease, err := locker.Acquire(ctx, "stock")
	if err != nil {
		return fail("acquire", err)
	}
	n, ver, err := stock.Get(ctx, "stock")
	if err != nil {
		return fail("read", err)
	}
	next, _ := json.Marshal(n - 1)
	fmt.Printf("READ %d %d %d\n", n, ver, lease.Token())
	// Stopped here by the parent; resumed and told to go on.
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "GO" {
		return fail("waiting for GO", in.Err())
	}
	sales := 0
	_, err = store.CompareAndSwapFenced(ctx, "stock", ver, lease.Token(), next)
	switch {
	case err == nil:
		sales++
		fmt.Println("WRITE applied (the old token was accepted)")
	case errors.Is(err, cas.ErrFenced):
		fmt.Printf("WRITE fenced: %v\n", err)
	default:
		fmt.Printf("WRITE error: %v\n", err)
	}
	// The watchdog, resumed too, finds the lock held by B's grant or gone.
	select {
	case <-lease.Context().Done():
		fmt.Printf("LEASE lost: %v\n", context.Cause(lease.Context()))
	case <-time.After(2 * pauseTTL):
		fmt.Println("LEASE still held after the pause")
	}
	if err := lease.Release(ctx); err != nil {
		return fail("release", err)
	}
	var attempts int
	left, _, err := hybrid.Update(ctx, locker, stock, "stock", sell,
		occ.WithObserver(occ.ObserverFuncs{Call: func(_ context.Context, c occ.Call) { attempts = c.Attempts }}))
	if err != nil {
		return fail("retry through hybrid.Update", err)
	}
	sales++
	fmt.Printf("SOLD %d sales=%d attempts=%d\n", left, sales, attempts)
	fmt.Println("DONE")
	return 0
}

// sell takes one item; the in-process story and hot-key tests on Redis
// are in package hybrid, with every other fenced store.
func sell(n int, _ bool) (int, error) {
	if n == 0 {
		return 0, errors.New("sold out")
	}
	return n - 1, nil
}
