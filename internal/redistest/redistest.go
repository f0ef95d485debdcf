// Package redistest gives tests a real Redis to work in: the server named
// by OCCKIT_REDIS_URL (started by `make test`, see scripts/servers/redis.sh),
// clients closed when the test ends, a key prefix private to each test
// whose keys are removed when it ends, and [Faults], which breaks a
// client's connections on purpose.
//
// A test that needs Redis and finds OCCKIT_REDIS_URL unset fails, loudly and
// with the way to get one: a missing server must never pass for a passing
// test.
package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/occkit/occkit/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// EnvURL is the environment variable holding the test server's URL.
const EnvURL = "OCCKIT_REDIS_URL"

// URL returns the test server's URL from OCCKIT_REDIS_URL, or fails the
// test.
func URL(t testing.TB) string {
	t.Helper()
	return testenv.Server{Env: EnvURL, What: "a Redis server", Script: "redis.sh",
		Own: "redis://[:password@]host:port[/db]"}.Lookup(t)
}

// Options returns client options for the test server.
func Options(t testing.TB) *redis.Options {
	t.Helper()
	opt, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("redistest: parse %s: %v", EnvURL, err)
	}
	return opt
}

// Client returns a client of the test server, after letting each
// configure function adjust its options, checks that it reaches the
// server, and closes it when the test ends.
func Client(t testing.TB, configure ...func(*redis.Options)) *redis.Client {
	t.Helper()
	opt := Options(t)
	for _, f := range configure {
		f(opt)
	}
	cli := redis.NewClient(opt)
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cli.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: ping %s (%s): %v", EnvURL, opt.Addr, err)
	}
	return cli
}

// Prefix returns a key prefix no other test uses ("occkit-test:<random>:",
// safe in a SCAN pattern). Every key under it is deleted when the test
// ends.
func Prefix(t testing.TB) string {
	t.Helper()
	p := newPrefix()
	t.Cleanup(func() { DeleteKeys(t, p) })
	return p
}

// newPrefix returns "occkit-test:<random>:".
func newPrefix() string {
	return testenv.UniqueName("occkit-test:") + ":"
}

// DeleteKeys deletes every key that starts with prefix (which must not
// contain SCAN pattern characters), on a connection of its own.
func DeleteKeys(t testing.TB, prefix string) {
	t.Helper()
	cli := redis.NewClient(Options(t))
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := cli.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("redistest: scanning %q: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := cli.Unlink(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("redistest: deleting keys under %q: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}

// Ctx returns a context that ends after d or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// FreeAddr returns a 127.0.0.1 address nothing listens on (a port bound
// and released): a server that is down.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return freeAddr(t)
}
