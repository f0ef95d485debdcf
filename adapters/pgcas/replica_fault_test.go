package pgcas_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// The fault: the replica stops replaying the primary's WAL for a few
// seconds (pg_wal_replay_pause), so that every read from it returns the
// state at the pause, while writers in two processes keep incrementing a
// few counters with occ.Update. Stale reads must only cost conflicts:
// each counter ends equal to the increments acknowledged, none lost, none
// doubled.

// Phases of the fault tests' timeline.
const (
	phaseBefore = iota
	phasePaused
	phaseAfter
	phases
)

var phaseNames = [phases]string{"before the pause", "replay paused", "after the pause"}

// phaseCounter is an occ observer counting conflicts and successful calls
// in the phase the test is in.
type phaseCounter struct {
	phase     atomic.Int32
	conflicts [phases]atomic.Int64
	successes [phases]atomic.Int64
}

func (c *phaseCounter) ObserveAttempt(_ context.Context, a occ.Attempt) {
	if a.Outcome == occ.OutcomeConflict {
		c.conflicts[c.phase.Load()].Add(1)
	}
}

func (c *phaseCounter) ObserveCall(_ context.Context, call occ.Call) {
	if call.Outcome == occ.OutcomeSuccess {
		c.successes[c.phase.Load()].Add(1)
	}
}

// report logs the conflicts per successful call of each phase, and
// returns the paused phase's conflicts.
func (c *phaseCounter) report(t *testing.T, who string) int64 {
	for p := range phases {
		n, k := c.successes[p].Load(), c.conflicts[p].Load()
		t.Logf("%s, %s: %d calls, %d conflicts (%.2f per call)", who, phaseNames[p], n, k, float64(k)/max(float64(n), 1))
	}
	return c.conflicts[phasePaused].Load()
}

// incrementResult is what the incrementing goroutines of one process
// did.
type incrementResult struct {
	Acked     map[string]int64 `json:"acked"` // increments acknowledged, per key
	Conflicts int64            `json:"conflicts"`
	Errors    []string         `json:"errors"`
}

// incrementUntil runs workers goroutines that increment random keys of
// keys with occ.Update through s until stop is closed, and returns what
// they did. A goroutine stops at its first error.
func incrementUntil(s *pgcas.Store, keys []string, workers int, stop <-chan struct{}, obs occ.Observer) incrementResult {
	ctx := context.Background()
	counters := cas.NewTyped(s, cas.JSON[int]())
	var (
		mu  sync.Mutex
		res = incrementResult{Acked: map[string]int64{}}
		wg  sync.WaitGroup
		cc  conflictCounter
	)
	opts := []occ.Option{occ.WithObserver(&cc)}
	if obs != nil {
		opts = append(opts, occ.WithObserver(obs))
	}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				_, _, err := occ.Update(ctx, counters, key, increment, opts...)
				mu.Lock()
				if err != nil {
					res.Errors = append(res.Errors, fmt.Sprintf("increment %s: %v", key, err))
					mu.Unlock()
					return
				}
				res.Acked[key]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.Conflicts = cc.conflicts.Load()
	return res
}

// replicaWorkerEnv makes TestReplicaWorkerProcess the second process of
// TestReplicaPausedReplay: it holds the JSON of a replicaWorkerSpec.
const replicaWorkerEnv = "OCCKIT_PGCAS_REPLICA_WORKER"

type replicaWorkerSpec struct {
	Schema   string        `json:"schema"`
	Keys     []string      `json:"keys"`
	Workers  int           `json:"workers"`
	Duration time.Duration `json:"duration"`
}

// TestReplicaWorkerProcess is the second process of
// TestReplicaPausedReplay, run by it as a child with replicaWorkerEnv
// set (and a no-op otherwise): a Store of its own on the same table,
// reading from the replica, increments the keys for the spec's duration
// after printing "ready", then prints "result " and the JSON of its
// incrementResult.
func TestReplicaWorkerProcess(t *testing.T) {
	raw := os.Getenv(replicaWorkerEnv)
	if raw == "" {
		return // not run as the child of TestReplicaPausedReplay
	}
	var spec replicaWorkerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatalf("%s: %v", replicaWorkerEnv, err)
	}
	open := func(url string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = spec.Schema
		syncCommit(cfg)
		return pgtest.Open(t, cfg)
	}
	s, err := pgcas.New(open(pgtest.URL(t)), pgcas.Config{ReadPool: open(pgtest.ReplicaURL(t))})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	stop := make(chan struct{})
	time.AfterFunc(spec.Duration, func() { close(stop) })
	res := incrementUntil(s, spec.Keys, spec.Workers, stop, nil)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("result %s\n", b)
}

// startReplicaWorker starts TestReplicaWorkerProcess as a child process
// and returns once it is ready, with a function that waits for its
// result.
func startReplicaWorker(t *testing.T, spec replicaWorkerSpec) (wait func() incrementResult) {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReplicaWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), replicaWorkerEnv+"="+string(b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var output []string
	// next returns the next line the child printed that starts with
	// prefix, or fails the test when it ends or takes more than a minute.
	next := func(prefix string) string {
		timeout := time.After(time.Minute)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					err := cmd.Wait()
					t.Fatalf("the worker process ended (%v) without printing %q; its output:\n%s\n%s", err, prefix, strings.Join(output, "\n"), stderr.String())
				}
				if strings.HasPrefix(line, prefix) {
					return strings.TrimPrefix(line, prefix)
				}
				output = append(output, line)
			case <-timeout:
				_ = cmd.Process.Kill()
				t.Fatalf("the worker process did not print %q within a minute; its output:\n%s\n%s", prefix, strings.Join(output, "\n"), stderr.String())
			}
		}
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
		for range lines {
		}
		if cmd.ProcessState == nil {
			_ = cmd.Wait()
		}
	})
	next("ready")
	return func() incrementResult {
		line := next("result ")
		for range lines {
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("the worker process failed: %v; its output:\n%s\n%s", err, strings.Join(output, "\n"), stderr.String())
		}
		var res incrementResult
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("the worker's result %q: %v", line, err)
		}
		return res
	}
}

// TestReplicaPausedReplay: two processes (this one and a child), each
// with a Store reading from the replica, increment eight counters with
// occ.Update for 4 s; for the middle 2 s the replica's replay is paused.
// Conflicts rise while it is paused (a read returns a version the primary
// has moved past as soon as its key has been written since the pause:
// 1.1 to 1.25 conflicts per call against 0.5 to 1.0 before, on the 2-core
// test machine; only their presence is asserted), and at the end each counter
// equals the increments both processes saw acknowledged.
func TestReplicaPausedReplay(t *testing.T) {
	const (
		workers = 4 // per process
		before  = time.Second
		paused  = 2 * time.Second // the replica serves every package's tests: see pgtest.PauseReplay
		after   = time.Second
	)
	ctx := context.Background()
	pool := pgtest.Pool(t, syncCommit)
	s := replicaStore(t, pool, pgcas.Config{})
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		mustPut(t, s, k, 0, "0")
	}
	pgtest.CatchUp(t, pool, s.ReadPool())

	wait := startReplicaWorker(t, replicaWorkerSpec{
		Schema:   pool.Config().ConnConfig.RuntimeParams["search_path"],
		Keys:     keys,
		Workers:  workers,
		Duration: before + paused + after,
	})
	var obs phaseCounter
	stop := make(chan struct{})
	done := make(chan incrementResult)
	go func() { done <- incrementUntil(s, keys, workers, stop, &obs) }()

	time.Sleep(before)
	pgtest.PauseReplay(t, s.ReadPool())
	obs.phase.Store(phasePaused)
	time.Sleep(paused)
	// The fault is real: the replica serves versions the primary has
	// moved past.
	for _, k := range keys {
		stale, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var current int64
		if err := pool.QueryRow(ctx, `SELECT version FROM occkit_cas WHERE key = $1`, k).Scan(&current); err != nil {
			t.Fatal(err)
		}
		if stale.Version >= cas.Version(current) {
			t.Errorf("key %s: the paused replica has version %d, the primary %d: not stale", k, stale.Version, current)
		}
	}
	obs.phase.Store(phaseAfter)
	pgtest.ResumeReplay(t, s.ReadPool())
	time.Sleep(after)
	close(stop)
	mine := <-done
	theirs := wait()

	for _, r := range []incrementResult{mine, theirs} {
		for _, e := range r.Errors {
			t.Error(e)
		}
	}
	if n := obs.report(t, "this process"); n == 0 {
		t.Error("no conflicts while the replica's replay was paused: the reads did not come from the replica")
	}
	t.Logf("the other process: %d conflicts in all", theirs.Conflicts)

	var acked int64
	for _, k := range keys {
		want := mine.Acked[k] + theirs.Acked[k]
		acked += want
		var got int64
		if err := pool.QueryRow(ctx, `SELECT convert_from(value, 'UTF8')::bigint FROM occkit_cas WHERE key = $1`, k).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("counter %s = %d, but %d increments were acknowledged (%d here, %d in the other process): lost or doubled",
				k, got, want, mine.Acked[k], theirs.Acked[k])
		}
	}
	if mine.Acked == nil || theirs.Acked == nil || acked == 0 {
		t.Fatalf("no increments acknowledged (%v, %v)", mine.Acked, theirs.Acked)
	}
	t.Logf("%d increments acknowledged, %d by the other process", acked, acked-sum(mine.Acked))
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// syncCommit makes the primary's sessions commit with synchronous_commit
// on: the test server runs with it off, and a commit's WAL then reaches
// the replica only when the WAL writer writes it (wal_writer_delay, 10 ms
// there), which would keep the replica 10 ms behind even without a
// fault. On, it is about 0.1 ms behind on loopback.
func syncCommit(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on" }

// counterRow is a row of TestReplicaTablePausedReplay's table.
type counterRow struct {
	ID      string `db:"id"`
	N       int64  `db:"n"`
	Version int64  `db:"version"`
}

// TestReplicaTablePausedReplay is TestReplicaPausedReplay for
// Table.Modify: two Table values, each on pools of its own (as two
// processes would have, taking no turns with each other), read from the
// replica and increment four rows; the replica's replay is paused in the
// middle. Conflicts happen while it is paused, and each row's counter
// ends equal to the increments acknowledged.
func TestReplicaTablePausedReplay(t *testing.T) {
	const (
		workers = 4 // per Table
		before  = time.Second
		paused  = 2 * time.Second
		after   = time.Second
	)
	ctx := context.Background()
	pool := pgtest.Pool(t, syncCommit)
	if _, err := pool.Exec(ctx, `CREATE TABLE counters (id text PRIMARY KEY, n bigint NOT NULL, version bigserial NOT NULL);
INSERT INTO counters (id, n) VALUES ('a', 0), ('b', 0), ('c', 0), ('d', 0)`); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d"}
	newTable := func(pool *pgxpool.Pool) *pgcas.Table[counterRow] {
		tbl, err := pgcas.NewTable[counterRow](pool, pgcas.TableConfig{Table: "counters", ReadPool: pgtest.ReplicaPool(t, pool)})
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	tables := []*pgcas.Table[counterRow]{newTable(pool), newTable(pgtest.Open(t, pool.Config()))}
	replica := tables[0].ReadPool()
	pgtest.CatchUp(t, pool, replica)

	var (
		obs    phaseCounter
		acked  [4]atomic.Int64
		failed atomic.Int64
		wg     sync.WaitGroup
		stop   = make(chan struct{})
	)
	for i := range 2 * workers {
		tbl := tables[i%2]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(len(keys))
				_, err := tbl.Modify(ctx, keys[k], func(r counterRow, exists bool) (counterRow, error) {
					if !exists {
						return r, occ.Permanent(fmt.Errorf("row %s is missing", keys[k]))
					}
					r.N++
					return r, nil
				}, occ.WithObserver(&obs))
				if err != nil {
					t.Errorf("modify %s: %v", keys[k], err)
					failed.Add(1)
					return
				}
				acked[k].Add(1)
			}
		})
	}
	time.Sleep(before)
	pgtest.PauseReplay(t, replica)
	obs.phase.Store(phasePaused)
	time.Sleep(paused)
	obs.phase.Store(phaseAfter)
	pgtest.ResumeReplay(t, replica)
	time.Sleep(after)
	close(stop)
	wg.Wait()

	if n := obs.report(t, "Table.Modify"); n == 0 {
		t.Error("no conflicts while the replica's replay was paused: the reads did not come from the replica")
	}
	for k, key := range keys {
		var got int64
		if err := pool.QueryRow(ctx, `SELECT n FROM counters WHERE id = $1`, key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := acked[k].Load(); got != want {
			t.Errorf("row %s: n = %d, but %d increments were acknowledged: lost or doubled", key, got, want)
		}
	}
}
