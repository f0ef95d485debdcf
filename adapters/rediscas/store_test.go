package rediscas_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newStore returns a store under a prefix no other test uses; its keys
// are deleted when the test ends.
func newStore(t testing.TB, cli redis.UniversalClient, cfg rediscas.Config) *rediscas.Store {
	t.Helper()
	cfg.Prefix = redistest.Prefix(t)
	return openStore(t, cli, cfg)
}

// openStore returns a store with cfg, its prefix as given.
func openStore(t testing.TB, cli redis.UniversalClient, cfg rediscas.Config) *rediscas.Store {
	t.Helper()
	s, err := rediscas.New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	cli := redistest.Client(t)
	probe := newStore(t, cli, rediscas.Config{})
	reopen, shortHold := castest.SameKeys(200*time.Millisecond, func(t *testing.T, s cas.Store, hold time.Duration) cas.Store {
		return openStore(t, cli, rediscas.Config{Prefix: s.(*rediscas.Store).Prefix(), ExclusiveTTL: hold})
	})
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newStore(t, cli, rediscas.Config{}) },
		Reopen:         reopen,
		ShortHold:      shortHold,
		ReturnsCurrent: true,
		Limits:         probe.Limits(),
	})
}

// TestConformanceSmallLimits runs the suite with small configured limits,
// so that the limits the store enforces are the ones it was given.
func TestConformanceSmallLimits(t *testing.T) {
	cli := redistest.Client(t)
	cfg := rediscas.Config{Limits: cas.Limits{MaxValueBytes: 4096, MaxKeyBytes: 100, MaxCommitOps: 10}}
	probe := newStore(t, cli, cfg)
	if l := probe.Limits(); l.MaxValueBytes != 4096 || l.MaxKeyBytes != 100 || l.MaxCommitOps != 10 {
		t.Fatalf("limits %+v do not follow the config %+v", l, cfg)
	}
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newStore(t, cli, cfg) },
		ReturnsCurrent: true,
		Limits:         probe.Limits(),
		Workers:        4,
		OpsPerWorker:   20,
	})
}

// TestLayout checks the documented layout: a hash per key, versions from
// the store's counter, tombstones that keep the fence and expire only
// without one.
func TestLayout(t *testing.T) {
	cli := redistest.Client(t)
	s := newStore(t, cli, rediscas.Config{TombstoneTTL: 30 * time.Second, History: 3})
	ctx := redistest.Ctx(t, 20*time.Second)

	v1, err := s.CompareAndSwap(ctx, "plain", 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := cli.HGetAll(ctx, s.DataKey("plain")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if h["v"] != "one" || h["n"] != fmt.Sprint(v1) || len(h["h"]) != 24 || h["f"] != "" {
		t.Fatalf("hash of a plain key = %q, want v, n, a history of one 24-byte entry, no f", h)
	}
	if n, _ := cli.Get(ctx, s.CounterKey()).Uint64(); n != uint64(v1) {
		t.Fatalf("counter = %d after the first write, version %d", n, v1)
	}
	if err := s.CompareAndDelete(ctx, "plain", v1); err != nil {
		t.Fatal(err)
	}
	h, _ = cli.HGetAll(ctx, s.DataKey("plain")).Result()
	if _, live := h["v"]; live || h["n"] != "" || len(h["h"]) != 48 {
		t.Fatalf("tombstone = %q, want no v, no n and a history of two entries", h)
	}
	if ttl := cli.PTTL(ctx, s.DataKey("plain")).Val(); ttl <= 0 || ttl > 30*time.Second {
		t.Fatalf("unfenced tombstone TTL = %v, want (0, 30s]", ttl)
	}
	if _, err := s.Get(ctx, "plain"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get of a tombstone: %v, want ErrNotFound", err)
	}
	v2, err := s.CompareAndSwap(ctx, "plain", 0, []byte("again"))
	if err != nil || v2 <= v1 {
		t.Fatalf("re-create = v%d, %v; want a version above %d", v2, err, v1)
	}
	if ttl := cli.PTTL(ctx, s.DataKey("plain")).Val(); ttl != -1 {
		t.Fatalf("re-created key has TTL %v, want none", ttl)
	}
	// The history keeps the last History (3) writes.
	v := v2
	for range 5 {
		if v, err = s.CompareAndSwap(ctx, "plain", v, []byte("more")); err != nil {
			t.Fatal(err)
		}
	}
	if h := cli.HGet(ctx, s.DataKey("plain"), "h").Val(); len(h) != 3*24 {
		t.Fatalf("history is %d bytes after 8 writes, want 3 entries of 24", len(h))
	}

	fv, err := s.CompareAndSwapFenced(ctx, "fenced", 0, 1<<63+5, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if f := cli.HGet(ctx, s.DataKey("fenced"), "f").Val(); f != "09223372036854775813" {
		t.Fatalf("fence field = %q, want 20 digits of 2^63+5", f)
	}
	if _, err := s.CompareAndSwapFenced(ctx, "fenced", fv, 1<<63+4, []byte("y")); !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("token 2^63+4 after 2^63+5: %v, want ErrFenced (tokens compared exactly)", err)
	}
	if err := s.CompareAndDelete(ctx, "fenced", fv); err != nil {
		t.Fatal(err)
	}
	if ttl := cli.PTTL(ctx, s.DataKey("fenced")).Val(); ttl != -1 {
		t.Fatalf("fenced tombstone has TTL %v, want none: the fence must survive", ttl)
	}
}

func TestNewConfig(t *testing.T) {
	cli := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer cli.Close()
	bad := []rediscas.Config{
		{Limits: cas.Limits{MaxValueBytes: rediscas.MaxValueLimit + 1}},
		{Limits: cas.Limits{MaxValueBytes: -1}},
		{Limits: cas.Limits{MaxCommitBytes: rediscas.MaxCommitBytes + 1}},
		{Prefix: strings.Repeat("p", rediscas.MaxPrefixBytes+1)},
		{TombstoneTTL: time.Microsecond},
		{ResolveTimeout: -time.Second},
		{History: -1},
		{History: rediscas.MaxHistory + 1},
	}
	for _, cfg := range bad {
		if _, err := rediscas.New(cli, cfg); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
	if _, err := rediscas.New(nil, rediscas.Config{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	s, err := rediscas.New(cli, rediscas.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.DataKey("k") != "occkit:d:k" || s.CounterKey() != "occkit:version" {
		t.Fatalf("default layout: %q, %q", s.DataKey("k"), s.CounterKey())
	}
	if l := s.Limits(); l.MaxValueBytes != 1<<20 || l.MaxKeyBytes != cas.DefaultMaxKeyBytes {
		t.Fatalf("default limits %+v", l)
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if _, err := rediscas.New(cc, rediscas.Config{Prefix: "orders{:"}); err == nil {
		t.Error("a cluster store with a brace but no hash tag in its prefix was accepted")
	}
	for _, p := range []string{"orders:", "{orders}:"} {
		if _, err := rediscas.New(cc, rediscas.Config{Prefix: p}); err != nil {
			t.Errorf("a cluster store with prefix %q: %v", p, err)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := rediscas.New(ring, rediscas.Config{Prefix: "orders:"}); err == nil {
		t.Error("a Ring store without a hash tag in its prefix was accepted")
	}
	if _, err := rediscas.New(ring, rediscas.Config{Prefix: "{orders}:", WaitReplicas: 1}); err == nil {
		t.Error("a Ring store waiting for replicas was accepted")
	}
	if _, err := rediscas.New(cli, rediscas.Config{WaitReplicas: -1}); err == nil {
		t.Error("negative WaitReplicas accepted")
	}
}

// TestValuesAreCopied: a value written or read is the caller's to change.
func TestValuesAreCopied(t *testing.T) {
	s := newStore(t, redistest.Client(t), rediscas.Config{})
	ctx := context.Background()
	in := []byte("abc")
	v, err := s.CompareAndSwap(ctx, "k", 0, in)
	if err != nil {
		t.Fatal(err)
	}
	in[0] = 'X'
	it, err := s.Get(ctx, "k")
	if err != nil || string(it.Value) != "abc" || it.Version != v {
		t.Fatalf("get = %q v%d, %v", it.Value, it.Version, err)
	}
}
