// Command occfaults runs occ.Update increments against each backend it can
// reach while a fault proxy (internal/faultproxy) between the client and
// the server injects network faults, and checks that no acknowledged
// increment was lost and none was applied twice.
//
//	go run ./benchmarks/cmd/occfaults --out DIR [--duration 10s]
//
// Backends: memory (memcas, in process: no network, so a concurrency
// baseline without faults), postgres (OCCKIT_PG_URL, or a throwaway server
// started with scripts/servers/postgres.sh), redis (OCCKIT_REDIS_URL, or
// scripts/servers/redis.sh), etcd (one member in process) and dynamodb
// (minidyn's server in process). A backend that cannot be started is
// skipped, and said so.
//
// Faults, each for --duration, on a fresh proxy and fresh keys:
//
//   - drop: every live connection is reset every 200 ms (a network path
//     that breaks; answers in flight are lost).
//   - latency: every forwarded chunk waits 2 ms more, in both directions.
//
// Each call is classified as succeeded, ambiguous (errors.Is
// cas.ErrAmbiguous) or failed. The counters are then read directly from the
// server: lost = max(0, succeeded - final) and duplicated = max(0, final -
// succeeded - ambiguous) must both be 0, or the command says so loudly and
// exits with status 1. Results go to DIR/faults.json, and a markdown table
// to stdout. A linearizability check (porcupine) over the faulted histories
// is not done yet: "linearizable" is null.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/benchmarks/internal/servers"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/dynamotest"
	"github.com/occkit/occkit/internal/faultproxy"
	"github.com/occkit/occkit/occ"
)

const (
	workers      = 8
	numKeys      = 4
	callTimeout  = 2 * time.Second
	maxAttempts  = 20
	dropEvery    = 200 * time.Millisecond
	addedLatency = 2 * time.Millisecond
)

const linearizableNote = "linearizable is null: a porcupine check over the faulted histories is not done yet; only lost and duplicated increments are checked"

// Run is one (backend, fault) row of faults.json.
type Run struct {
	Backend      string   `json:"backend"`
	Fault        string   `json:"fault"`
	Ops          int64    `json:"ops"`
	Succeeded    int64    `json:"succeeded"`
	Ambiguous    int64    `json:"ambiguous"`
	Failed       int64    `json:"failed"`
	Final        int64    `json:"final"`
	Lost         int64    `json:"lost"`
	Duplicated   int64    `json:"duplicated"`
	Linearizable *bool    `json:"linearizable"`
	Drops        int      `json:"connections_dropped"`
	Errors       []string `json:"sample_errors,omitempty"`
}

// Skipped is a backend the command could not run.
type Skipped struct {
	Backend string `json:"backend"`
	Reason  string `json:"reason"`
}

// Report is faults.json.
type Report struct {
	Started     time.Time `json:"started"`
	DurationRun string    `json:"duration_per_run"`
	Workers     int       `json:"workers"`
	Keys        int       `json:"keys"`
	CallTimeout string    `json:"call_timeout"`
	Note        string    `json:"note"`
	Runs        []Run     `json:"runs"`
	Skipped     []Skipped `json:"skipped,omitempty"`
}

// target is one run's stores: ops goes through the proxy (nil for
// memory), direct reads the server itself.
type target struct {
	ops, direct cas.Store
	proxy       *faultproxy.Proxy
	retryable   func(error) bool
	close       func()
}

// backend opens a fresh target (fresh keys, fresh proxy) for each run.
type backend struct {
	name   string
	faults []string
	open   func(ctx context.Context, ns string) (*target, error)
}

func main() {
	os.Exit(run())
}

func run() int {
	out := flag.String("out", "", "directory for faults.json (required)")
	duration := flag.Duration("duration", 10*time.Second, "length of each (backend, fault) run")
	flag.Parse()
	if *out == "" || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "usage: occfaults --out DIR [--duration 10s]")
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "occfaults:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	rep := Report{
		Started: time.Now().UTC(), DurationRun: duration.String(), Workers: workers, Keys: numKeys,
		CallTimeout: callTimeout.String(), Note: linearizableNote,
	}
	backends, skipped := openBackends(ctx, &cleanups)
	rep.Skipped = skipped
	for _, s := range skipped {
		logf("%s: skipped: %s", s.Backend, s.Reason)
	}

	bad := false
	for _, b := range backends {
		for _, fault := range b.faults {
			if ctx.Err() != nil {
				break
			}
			r, err := runOne(ctx, b, fault, *duration)
			if err != nil {
				logf("%s/%s: %v", b.name, fault, err)
				rep.Skipped = append(rep.Skipped, Skipped{Backend: b.name + "/" + fault, Reason: err.Error()})
				bad = true
				continue
			}
			logf("%s/%s: %d calls: %d succeeded, %d ambiguous, %d failed; final %d; lost %d, duplicated %d",
				b.name, fault, r.Ops, r.Succeeded, r.Ambiguous, r.Failed, r.Final, r.Lost, r.Duplicated)
			if r.Lost != 0 || r.Duplicated != 0 {
				bad = true
				fmt.Fprintf(os.Stderr, "\n!!!!!!!! %s under %s: %d LOST and %d DUPLICATED increments !!!!!!!!\n\n", b.name, fault, r.Lost, r.Duplicated)
			}
			rep.Runs = append(rep.Runs, r)
		}
	}

	buf, _ := json.MarshalIndent(rep, "", "  ")
	path := filepath.Join(*out, "faults.json")
	if err := os.WriteFile(path, append(buf, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "occfaults:", err)
		return 1
	}
	printTable(rep)
	logf("wrote %s", path)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "occfaults: interrupted")
		return 1
	}
	if bad {
		fmt.Fprintln(os.Stderr, "occfaults: FAILED: an increment was lost or duplicated, or a run could not be done (see above)")
		return 1
	}
	return 0
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "occfaults: "+format+"\n", args...)
}

func printTable(rep Report) {
	fmt.Println("| backend | fault | ops | succeeded | ambiguous | failed | lost | duplicated | linearizable |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range rep.Runs {
		fmt.Printf("| %s | %s | %d | %d | %d | %d | %d | %d | not checked |\n",
			r.Backend, r.Fault, r.Ops, r.Succeeded, r.Ambiguous, r.Failed, r.Lost, r.Duplicated)
	}
	for _, s := range rep.Skipped {
		fmt.Printf("\n%s: skipped: %s\n", s.Backend, s.Reason)
	}
	fmt.Printf("\n%d workers, %d keys, %s per run, %s per call. %s.\n", rep.Workers, rep.Keys, rep.DurationRun, rep.CallTimeout, linearizableNote)
}

// runOne runs one fault against one backend and checks the counters.
func runOne(ctx context.Context, b backend, fault string, d time.Duration) (Run, error) {
	ns := "occfaults_" + strings.ReplaceAll(fault, "-", "_") + "_" + randHex(4)
	tg, err := b.open(ctx, ns)
	if err != nil {
		return Run{}, err
	}
	defer tg.close()
	counters := cas.NewTyped(tg.ops, cas.JSON[int64]())
	keys := make([]string, numKeys)
	for i := range keys {
		keys[i] = "counter-" + strconv.Itoa(i)
	}
	opts := []occ.Option{occ.WithMaxAttempts(maxAttempts)}
	if tg.retryable != nil {
		opts = append(opts, occ.WithRetryable(tg.retryable))
	}

	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var succeeded, ambiguous, failed atomic.Int64
	var errMu sync.Mutex
	errSeen := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; rctx.Err() == nil; i++ {
				// The end of the run stops new calls, not calls in flight:
				// each has its own timeout.
				cctx, ccancel := context.WithTimeout(ctx, callTimeout)
				_, _, err := occ.Update(cctx, counters, keys[i%numKeys], func(n int64, _ bool) (int64, error) {
					return n + 1, nil
				}, opts...)
				ccancel()
				switch {
				case err == nil:
					succeeded.Add(1)
				case errors.Is(err, cas.ErrAmbiguous):
					ambiguous.Add(1)
				default:
					failed.Add(1)
					errMu.Lock()
					errSeen[shorten(err.Error())]++
					errMu.Unlock()
				}
			}
		}()
	}

	// The fault loop.
	drops := 0
	switch fault {
	case "drop":
		t := time.NewTicker(dropEvery)
	loop:
		for {
			select {
			case <-t.C:
				drops += tg.proxy.DropAll()
			case <-rctx.Done():
				break loop
			}
		}
		t.Stop()
	case "latency":
		tg.proxy.SetLatency(addedLatency)
		<-rctx.Done()
	default:
		<-rctx.Done()
	}
	wg.Wait()
	if tg.proxy != nil {
		tg.proxy.SetLatency(0)
	}
	if ctx.Err() != nil {
		return Run{}, ctx.Err()
	}
	// Writes whose answers were lost have reached the server by now; let
	// any still in flight there settle before reading.
	time.Sleep(500 * time.Millisecond)

	vctx, vcancel := context.WithTimeout(ctx, 30*time.Second)
	defer vcancel()
	direct := cas.NewTyped(tg.direct, cas.JSON[int64]())
	var final int64
	for _, k := range keys {
		n, _, err := direct.Get(vctx, k)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return Run{}, fmt.Errorf("reading %s directly: %w", k, err)
		}
		final += n
	}
	r := Run{
		Backend: b.name, Fault: fault,
		Succeeded: succeeded.Load(), Ambiguous: ambiguous.Load(), Failed: failed.Load(),
		Final: final, Drops: drops,
	}
	r.Ops = r.Succeeded + r.Ambiguous + r.Failed
	r.Lost = max(0, r.Succeeded-final)
	r.Duplicated = max(0, final-r.Succeeded-r.Ambiguous)
	r.Errors = topErrors(errSeen, 5)
	return r, nil
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func topErrors(m map[string]int, n int) []string {
	type kv struct {
		msg string
		n   int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var out []string
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, fmt.Sprintf("%d× %s", all[i].n, all[i].msg))
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var networkFaults = []string{"drop", "latency"}

// openBackends starts (or finds) the servers; what it starts is stopped
// by the cleanups, in reverse order.
func openBackends(ctx context.Context, cleanups *[]func()) ([]backend, []Skipped) {
	bs := []backend{{
		name:   "memory",
		faults: []string{"none"},
		open: func(context.Context, string) (*target, error) {
			s := memcas.New()
			return &target{ops: s, direct: s, close: func() {}}, nil
		},
	}}
	var skipped []Skipped
	root, rootErr := func() (string, error) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		return servers.RepoRoot(wd)
	}()

	// PostgreSQL.
	if b, err := openPostgres(ctx, root, rootErr, cleanups); err != nil {
		skipped = append(skipped, Skipped{"postgres", err.Error()})
	} else {
		bs = append(bs, b)
	}
	// Redis.
	if b, err := openRedis(ctx, root, rootErr, cleanups); err != nil {
		skipped = append(skipped, Skipped{"redis", err.Error()})
	} else {
		bs = append(bs, b)
	}
	// etcd, in process.
	if b, err := openEtcd(ctx, cleanups); err != nil {
		skipped = append(skipped, Skipped{"etcd", err.Error()})
	} else {
		bs = append(bs, b)
	}
	// DynamoDB: minidyn, in process.
	bs = append(bs, openDynamo(cleanups))
	return bs, skipped
}

// serverURL returns $envVar, or starts scripts/servers/<name>.sh.
func serverURL(ctx context.Context, root string, rootErr error, name, envVar, binary string, cleanups *[]func()) (string, error) {
	if u := os.Getenv(envVar); u != "" {
		return u, nil
	}
	if rootErr != nil {
		return "", fmt.Errorf("%s is not set, and the scripts cannot be found: %w", envVar, rootErr)
	}
	logf("%s: %s is not set: starting a throwaway server with scripts/servers/%s.sh", name, envVar, name)
	s, err := servers.StartScript(ctx, root, name, envVar, binary, os.Stderr)
	if err != nil {
		return "", fmt.Errorf("%s is not set, and %w", envVar, err)
	}
	*cleanups = append(*cleanups, func() {
		if err := s.Stop(context.Background()); err != nil {
			logf("%s: stopping the server: %v", name, err)
		} else {
			logf("%s: stopped the server the command started", name)
		}
	})
	return s.URL, nil
}

func hostPort(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	if p.Port() == "" {
		return "", fmt.Errorf("no port in %s", p.Redacted())
	}
	return p.Host, nil
}

func openPostgres(ctx context.Context, root string, rootErr error, cleanups *[]func()) (backend, error) {
	u, err := serverURL(ctx, root, rootErr, "postgres", "OCCKIT_PG_URL", servers.PostgresBinary, cleanups)
	if err != nil {
		return backend{}, err
	}
	hp, err := hostPort(u)
	if err != nil {
		return backend{}, err
	}
	direct, err := pgxpool.New(ctx, u)
	if err != nil {
		return backend{}, err
	}
	*cleanups = append(*cleanups, direct.Close)
	open := func(ctx context.Context, ns string) (*target, error) {
		ds, err := pgcas.New(direct, pgcas.Config{Table: ns})
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := ds.CreateTable(cctx); err != nil {
			return nil, err
		}
		dropTable := func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = direct.Exec(dctx, "DROP TABLE IF EXISTS "+pgx.Identifier{ns}.Sanitize())
		}
		p, err := faultproxy.New(hp)
		if err != nil {
			dropTable()
			return nil, err
		}
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			p.Close()
			dropTable()
			return nil, err
		}
		host, port, _ := net.SplitHostPort(p.Addr())
		pn, _ := strconv.Atoi(port)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
		cfg.ConnConfig.Fallbacks = nil
		cfg.ConnConfig.ConnectTimeout = callTimeout
		cfg.MaxConns = 2 * workers
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			p.Close()
			dropTable()
			return nil, err
		}
		ops, err := pgcas.New(pool, pgcas.Config{Table: ns})
		if err != nil {
			pool.Close()
			p.Close()
			dropTable()
			return nil, err
		}
		return &target{ops: ops, direct: ds, proxy: p, retryable: pgcas.Retryable, close: func() {
			p.Close()
			pool.Close()
			dropTable()
		}}, nil
	}
	return backend{name: "postgres", faults: networkFaults, open: open}, nil
}

func openRedis(ctx context.Context, root string, rootErr error, cleanups *[]func()) (backend, error) {
	u, err := serverURL(ctx, root, rootErr, "redis", "OCCKIT_REDIS_URL", servers.RedisBinary, cleanups)
	if err != nil {
		return backend{}, err
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		return backend{}, err
	}
	direct := redis.NewClient(opts)
	*cleanups = append(*cleanups, func() { direct.Close() })
	open := func(ctx context.Context, ns string) (*target, error) {
		prefix := ns + ":"
		ds, err := rediscas.New(direct, rediscas.Config{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		p, err := faultproxy.New(opts.Addr)
		if err != nil {
			return nil, err
		}
		po := *opts
		po.Addr = p.Addr()
		po.ContextTimeoutEnabled = true
		po.PoolSize = 2 * workers
		cli := redis.NewClient(&po)
		ops, err := rediscas.New(cli, rediscas.Config{Prefix: prefix})
		if err != nil {
			cli.Close()
			p.Close()
			return nil, err
		}
		return &target{ops: ops, direct: ds, proxy: p, retryable: rediscas.Retryable, close: func() {
			p.Close()
			cli.Close()
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			iter := direct.Scan(dctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(dctx) {
				direct.Del(dctx, iter.Val())
			}
		}}, nil
	}
	return backend{name: "redis", faults: networkFaults, open: open}, nil
}

func openEtcd(ctx context.Context, cleanups *[]func()) (backend, error) {
	srv, err := servers.StartEtcd(ctx)
	if err != nil {
		return backend{}, err
	}
	logf("etcd: in-process member %s at %s", srv.Version, srv.Endpoint)
	*cleanups = append(*cleanups, srv.Close)
	direct, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return backend{}, err
	}
	*cleanups = append(*cleanups, func() { direct.Close() })
	hp, err := hostPort(srv.Endpoint)
	if err != nil {
		return backend{}, err
	}
	open := func(ctx context.Context, ns string) (*target, error) {
		prefix := ns + "/"
		ds, err := etcdcas.New(direct, etcdcas.Config{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		p, err := faultproxy.New(hp)
		if err != nil {
			return nil, err
		}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{"http://" + p.Addr()},
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
			// Reconnect soon after a drop (gRPC's default first wait is 1 s).
			DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           grpcbackoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
				MinConnectTimeout: callTimeout,
			})},
		})
		if err != nil {
			p.Close()
			return nil, err
		}
		ops, err := etcdcas.New(cli, etcdcas.Config{Prefix: prefix})
		if err != nil {
			cli.Close()
			p.Close()
			return nil, err
		}
		return &target{ops: ops, direct: ds, proxy: p, retryable: etcdcas.Retryable, close: func() {
			cli.Close()
			p.Close()
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = direct.Delete(dctx, prefix, clientv3.WithPrefix())
		}}, nil
	}
	return backend{name: "etcd", faults: networkFaults, open: open}, nil
}

func openDynamo(cleanups *[]func()) backend {
	srv := servers.StartMinidyn()
	logf("dynamodb: minidyn's server in process at %s", srv.URL)
	*cleanups = append(*cleanups, srv.Close)
	direct, closeIdle := dynamotest.NewClient(srv.URL)
	*cleanups = append(*cleanups, closeIdle)
	open := func(ctx context.Context, ns string) (*target, error) {
		table := strings.ReplaceAll(ns, "_", "-")
		ds, err := dynamocas.New(direct, dynamocas.Config{Table: table})
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := ds.CreateTable(cctx); err != nil {
			return nil, err
		}
		dropTable := func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = direct.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		}
		hp, err := hostPort(srv.URL)
		if err != nil {
			dropTable()
			return nil, err
		}
		p, err := faultproxy.New(hp)
		if err != nil {
			dropTable()
			return nil, err
		}
		cli, closeCli := dynamotest.NewClient("http://" + p.Addr())
		ops, err := dynamocas.New(cli, dynamocas.Config{Table: table})
		if err != nil {
			closeCli()
			p.Close()
			dropTable()
			return nil, err
		}
		return &target{ops: ops, direct: ds, proxy: p, retryable: dynamocas.Retryable, close: func() {
			p.Close()
			closeCli()
			dropTable()
		}}, nil
	}
	return backend{name: "dynamodb", faults: networkFaults, open: open}
}
