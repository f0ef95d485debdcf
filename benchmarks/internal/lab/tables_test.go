package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/internal/pgtest"
)

// repoCell is a short cell of a repository strategy for the tests below:
// 8 workers on one hot row at the lab's default attempt limit (where
// pgcas.Table.Modify used to give up), or an inventory of 2 items that
// sells out (a declined sale must come back through Modify and
// gormocc.Update as declined, not failed).
func repoCell(backend, strategy, workload string, procs int) Cell {
	c := Cell{Backend: backend, Strategy: strategy, Workload: workload, Workers: 8, Keys: 1, Ops: 200, Seed: 12, Procs: procs}
	if workload == "inventory" {
		c.Keys, c.Initial = 2, 80
	}
	return c
}

// checkRepoCell runs c and checks the invariant (read back from the
// strategy's own table) and that no operation failed, warm-up included.
func checkRepoCell(t *testing.T, l *Lab, c Cell) {
	t.Helper()
	r := runCell(t, l, c)
	if !r.InvariantOK || r.FailedOps != 0 || r.TotalFailedOps != 0 || r.Ops+r.DeclinedOps != c.Ops {
		t.Errorf("%s: invariant %v %s; %d committed, %d declined, %d failed (%d in all: %s)",
			CellName(c), r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.TotalFailedOps, r.Error)
	}
	if c.Workload == "inventory" && r.DeclinedOps != c.Ops-int64(c.Keys)*c.Initial {
		t.Errorf("%s: %d sales declined, want %d (every item sold out)", CellName(c), r.DeclinedOps, c.Ops-int64(c.Keys)*c.Initial)
	}
}

// runTxnCells checks occ-table-txn (Table.ModifyMany) and occ-tables-txn
// (Txn) on backend with
// transfers between two hot rows, and across procs processes when procs
// > 1: exact, nothing failed.
func runTxnCells(t *testing.T, l *Lab, backend string, procs int) {
	t.Helper()
	for _, s := range []string{"occ-table-txn", "occ-tables-txn"} {
		c := Cell{Backend: backend, Strategy: s, Workload: "transfer", Workers: 8, Keys: 2, Ops: 200, Seed: 12}
		t.Run(s+"/transfer", func(t *testing.T) { checkRepoCell(t, l, c) })
		if procs > 1 {
			c.Procs = procs
			t.Run(s+"/procs", func(t *testing.T) { checkRepoCell(t, l, c) })
		}
	}
}

// runRepoCells checks the named repository strategies on backend, on
// both single-key workloads, in one process and, with procs, in that many
// (the lab's test binary run again through ChildMain).
func runRepoCells(t *testing.T, l *Lab, backend string, procs int, strategies ...string) {
	t.Helper()
	for _, s := range strategies {
		for _, wl := range []string{"counter", "inventory"} {
			t.Run(s+"/"+wl, func(t *testing.T) { checkRepoCell(t, l, repoCell(backend, s, wl, 1)) })
		}
		if procs > 1 {
			t.Run(s+"/procs", func(t *testing.T) { checkRepoCell(t, l, repoCell(backend, s, "counter", procs)) })
		}
	}
}

// TestTablesSQLite runs the repository strategies on the sqlite backend
// (sqlcas.Table; GORM through github.com/libtnb/sqlite), also across two
// processes, and checks that they do not apply where their tables do not
// exist.
func TestTablesSQLite(t *testing.T) {
	l := openLab(t, "memory", "sqlite")
	runRepoCells(t, l, "sqlite", 2, "occ-table", "occ-table-combine", "occ-gorm", "occ-http", "occ-http-modify")
	runTxnCells(t, l, "sqlite", 2)
	for _, s := range []string{"occ-table", "occ-table-combine", "occ-gorm"} {
		wantNotApplicable(t, l, Cell{Backend: "memory", Strategy: s, Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
	}
}

// TestTablesPostgres runs the repository strategies on PostgreSQL
// (pgcas.Table; GORM through pgx's database/sql driver) from
// OCCKIT_PG_URL, also across two processes; it fails, saying how to get
// a server, when the variable is unset.
func TestTablesPostgres(t *testing.T) {
	pgtest.URL(t)
	l := openLab(t, "postgres")
	runRepoCells(t, l, "postgres", 2, "occ-table", "occ-table-combine", "occ-gorm", "occ-http", "occ-http-modify")
	runTxnCells(t, l, "postgres", 2)
	// lock-http: the FOR UPDATE baseline behind the same kind of
	// service, exact too.
	for _, wl := range []string{"counter", "inventory"} {
		t.Run("lock-http/"+wl, func(t *testing.T) { checkRepoCell(t, l, repoCell("postgres", "lock-http", wl, 1)) })
	}
}

// TestTablesMySQL runs the table strategies on MySQL/MariaDB (sqlcas.Table)
// from OCCKIT_MYSQL_DSN; it fails, saying how to get a server, when the
// variable is unset. occ-gorm does not run there (no GORM MySQL driver in
// the lab).
func TestTablesMySQL(t *testing.T) {
	mysqltest.Config(t)
	l := openLab(t, "mysql")
	runRepoCells(t, l, "mysql", 0, "occ-table", "occ-table-combine", "occ-http-modify", "lock-http")
	runTxnCells(t, l, "mysql", 0)
	wantNotApplicable(t, l, Cell{Backend: "mysql", Strategy: "occ-gorm", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
}

// TestTablesDynamoDB runs the table strategies on the dynamodb backend
// (dynamocas.Table) over minidyn's server in process.
func TestTablesDynamoDB(t *testing.T) {
	l := openIsolatedLab(t, "dynamodb")
	runRepoCells(t, l, "dynamodb", 0, "occ-table", "occ-table-combine", "occ-http")
	wantNotApplicable(t, l, Cell{Backend: "dynamodb", Strategy: "lock-http", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
}

// TestOwnTableInvariant: the invariant of an OwnTable strategy is checked
// on the values its table holds (read through Value), not on the cell's
// store, which stays empty: a table that lost an update fails the cell.
func TestOwnTableInvariant(t *testing.T) {
	for _, lose := range []bool{false, true} {
		lossy := strategySpec{
			Name: "test-own-table", Kind: kindOptimistic, SingleKey: true, OwnTable: true,
			New: func(_ context.Context, h *harness) (cellStrategy, error) {
				if v, _, err := h.Values.Get(context.Background(), h.Keys[0]); !errors.Is(err, cas.ErrNotFound) {
					return nil, fmt.Errorf("the store was seeded (%d, %v)", v, err)
				}
				return &countingTable{initial: h.Cell.Initial, lose: lose}, nil
			},
		}
		strategySpecs = append(strategySpecs, lossy)
		l := openIsolatedLab(t, "memory")
		r := runCell(t, l, Cell{Backend: "memory", Strategy: lossy.Name, Workload: "counter", Workers: 4, Keys: 1, Ops: 100})
		strategySpecs = strategySpecs[:len(strategySpecs)-1]
		if r.InvariantOK == lose {
			t.Errorf("a table that loses an update: %v; invariant ok %v (%s)", lose, r.InvariantOK, r.Invariant)
		}
	}
}

// countingTable is an OwnTable strategy over a counter in memory that,
// with lose, forgets its first increment.
type countingTable struct {
	mu      sync.Mutex
	n       int64
	initial int64
	lose    bool
}

func (c *countingTable) Do(context.Context, int, operation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return nil
}

func (c *countingTable) Close(context.Context) error { return nil }

func (c *countingTable) Value(context.Context, string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lose {
		return c.initial + c.n - 1, nil
	}
	return c.initial + c.n, nil
}

// wantGoal is a goal check a test expects, by its key in the test's map
// of checks.
type wantGoal struct {
	key, status string
	ratio       float64
}

// wantGoals checks that got holds each wanted check, with its status and
// ratio.
func wantGoals(t *testing.T, got map[string]goalCheck, want []wantGoal) {
	t.Helper()
	for _, tc := range want {
		c, ok := got[tc.key]
		if !ok {
			t.Errorf("no check %q", tc.key)
			continue
		}
		if c.Status != tc.status || c.Ratio < tc.ratio-1e-9 || c.Ratio > tc.ratio+1e-9 {
			t.Errorf("%s: %s %.3f×, want %s %.3f× (%s)", tc.key, c.Status, c.Ratio, tc.status, tc.ratio, c.Detail)
		}
	}
}

// TestRepositoryGoalChecks: the repository paths' goals judge occ-table
// against occ on the same backend and occ-table-combine against the best
// cross-process lock (lock-local, however fast, is no rival), each at
// its own kind of point, and count failed operations at every point.
func TestRepositoryGoalChecks(t *testing.T) {
	cell := func(strategy string, workers, keys int, ops float64, failed int64, procs int) Result {
		return Result{Backend: "postgres", Workload: "counter", Strategy: strategy, Workers: workers, Keys: keys,
			Throughput: ops, TotalFailedOps: failed, WorkersCommitted: workers, InvariantOK: true, Procs: procs}
	}
	results := []Result{
		// 1 row, 16 workers: occ-table 0.92× occ; combined 3.5× FOR
		// UPDATE (lock-local's 10,000 does not count); occ-gorm failed 3.
		cell("occ", 16, 1, 1000, 0, 1),
		cell("occ-table", 16, 1, 920, 0, 1),
		cell("occ-table-combine", 16, 1, 3500, 0, 1),
		cell("occ-gorm", 16, 1, 500, 3, 1),
		cell("lock-pg-for-update", 16, 1, 1000, 0, 1),
		cell("lock-local", 16, 1, 10000, 0, 1),
		// 1000 keys: occ-table 0.9× occ, not met.
		cell("occ", 16, 1000, 1000, 0, 1),
		cell("occ-table", 16, 1000, 900, 0, 1),
		// 4 processes, 1 row: no hot goal (one process only), but
		// failures still count.
		cell("occ", 16, 1, 1000, 0, 4),
		cell("occ-table", 16, 1, 100, 1, 4),
		// Behind HTTP, 8 workers on 1 row: occ-http-modify 2× lock-http,
		// which is no rival for the strategies without a service (it is
		// the fastest lock here, yet occ-table-combine's check above
		// stays against FOR UPDATE).
		cell("occ", 8, 1, 1000, 0, 1),
		cell("occ-http-modify", 8, 1, 4000, 0, 1),
		cell("occ-http", 8, 1, 500, 0, 1),
		cell("lock-http", 8, 1, 2000, 0, 1),
		cell("lock-pg-for-update", 8, 1, 1000, 0, 1),
		cell("occ-combine", 8, 1, 3000, 0, 1),
	}
	got := map[string]goalCheck{}
	for _, c := range checkGoals(results) {
		who := "" // the strategy of a count, which is checked per strategy
		if c.Count {
			who, _, _ = strings.Cut(c.Detail, ":")
		}
		got[c.Goal+"|"+c.Point.String()+"|"+c.Setup+"|"+who] = c
	}
	wantGoals(t, got, []wantGoal{
		{goalTableHot + "|16w 1k||", goalMet, 0.92},
		{goalTableCombineHot + "|16w 1k||", goalMet, 3.5},
		{goalTableCool + "|16w 1000k θ=0||", goalNotMet, 0.9},
		{goalRepoNoFail + "|16w 1k||occ-table", goalMet, 0},
		{goalRepoNoFail + "|16w 1k||occ-table-combine", goalMet, 0},
		{goalRepoNoFail + "|16w 1k||occ-gorm", goalNotMet, 0},
		{goalRepoNoFail + "|16w 1k|4 processes|occ-table", goalNotMet, 0},
		{goalHTTP + "|8w 1k||", goalMet, 2},
		{goalCombineHot + "|8w 1k||", goalMet, 3},
		{goalRepoNoFail + "|8w 1k||occ-http", goalMet, 0},
	})
	for k := range got {
		if strings.HasPrefix(k, goalTableHot+"|16w 1k|4 processes") || strings.HasPrefix(k, goalTableCombineHot+"|16w 1k|4 processes") {
			t.Errorf("a one-process goal was checked across processes: %s", k)
		}
	}
}

// TestTxnGoalChecks: the transfer goals judge occ-txn and occ-cached
// against the best cross-process lock over 1000 keys (lock-local is no
// rival), and occ-txn on two hot keys against FOR UPDATE with its tail
// bounded by the best queueing lock's.
func TestTxnGoalChecks(t *testing.T) {
	cell := func(backend, strategy string, keys int, ops, p999 float64) Result {
		return Result{Backend: backend, Workload: "transfer", Strategy: strategy, Workers: 8, Keys: keys,
			Throughput: ops, P999Ms: p999, WorkersCommitted: 8, InvariantOK: true, Procs: 1}
	}
	results := []Result{
		cell("x", "occ-txn", 1000, 3000, 5), cell("x", "occ-cached", 1000, 3400, 5),
		cell("x", "lock-pg-for-update", 1000, 1800, 5), cell("x", "lock-local", 1000, 10000, 1),
		// Two hot keys: x meets (1.125×, p99.9 2×), y misses on its tail
		// (4× FOR UPDATE's) though faster.
		cell("x", "occ-txn", 2, 900, 20), cell("x", "lock-pg-for-update", 2, 800, 10),
		cell("y", "occ-txn", 2, 1000, 40), cell("y", "lock-mysql-for-update", 2, 800, 10),
		// y's hybrid failed 3 operations: the point's "0 failed" check
		// is not met there, and met at x's points.
		func() Result { r := cell("y", "hybrid", 2, 500, 10); r.TotalFailedOps = 3; return r }(),
	}
	got := map[string]goalCheck{}
	for _, c := range checkGoals(results) {
		got[c.Backend+"|"+c.Goal+"|"+c.Point.String()] = c
	}
	wantGoals(t, got, []wantGoal{
		{"x|" + goalTxnCool + "|8w 1000k θ=0", goalMet, 3000.0 / 1800},
		{"x|" + goalTxnCached + "|8w 1000k θ=0", goalNotMet, 3400.0 / 1800},
		{"x|" + goalTxnHot + "|8w 2k", goalMet, 900.0 / 800},
		{"y|" + goalTxnHot + "|8w 2k", goalNotMet, 1000.0 / 800},
		{"x|" + goalNoFail + "|8w 2k", goalMet, 0},
		{"x|" + goalNoFail + "|8w 1000k θ=0", goalMet, 0},
		{"y|" + goalNoFail + "|8w 2k", goalNotMet, 0},
	})
}
