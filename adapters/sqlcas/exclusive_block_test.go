package sqlcas_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/internal/txntest"
	"github.com/occkit/occkit/occ"
)

// TestExclusiveBlock: on MariaDB an exclusive update of a live row writes
// and commits in one compound statement; the row is then free at once (a
// plain write from another connection does not wait), and exclusive and
// optimistic writers mixed on one key lose no update.
func TestExclusiveBlock(t *testing.T) {
	ctx := context.Background()
	store, mariadb, vs := blockStore(t)
	before := sqlcas.ExclusiveBlocks()
	v, err := store.UpdateExclusive(ctx, "a", func(cur cas.Item) ([]byte, bool, error) {
		return []byte(string(cur.Value) + "+"), true, nil
	})
	if err != nil || v != vs[0]+1 {
		t.Fatalf("exclusive update: v%d, %v; want v%d", v, err, vs[0]+1)
	}
	if got := sqlcas.ExclusiveBlocks() - before; (got == 1) != mariadb {
		t.Fatalf("%d exclusive updates committed as a block; the server is MariaDB: %v", got, mariadb)
	}
	// Nothing holds the row: a write from elsewhere goes through before a
	// lock wait could end (a connection given back to the pool inside its
	// transaction would still hold it).
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := store.CompareAndSwap(wctx, "a", v, []byte("2")); err != nil {
		t.Fatalf("write after the exclusive update: %v", err)
	}

	// Mixed writers on one key, each adding 1: the final count is the
	// number of calls that succeeded.
	const workers, each = 4, 40
	ctr := cas.NewTyped(store, cas.JSON[int64]())
	if _, err := ctr.CompareAndSwap(ctx, "n", 0, 0); err != nil {
		t.Fatal(err)
	}
	before = sqlcas.ExclusiveBlocks()
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range each {
				_, err := store.UpdateExclusive(ctx, "n", func(cur cas.Item) ([]byte, bool, error) {
					n, err := strconv.ParseInt(string(cur.Value), 10, 64)
					return []byte(strconv.FormatInt(n+1, 10)), true, err
				})
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			for range each {
				_, _, err := occ.Update(ctx, ctr, "n", func(n int64, _ bool) (int64, error) { return n + 1, nil },
					occ.WithMaxAttempts(1000), occ.WithExclusiveAfter(0)) // only the other writers hold the row
				errs <- err
			}
		}()
	}
	wg.Wait()
	noErrors(t, errs)
	n, _, err := ctr.Get(ctx, "n")
	if err != nil || n != 2*workers*each {
		t.Fatalf("n = %d, %v; want %d", n, err, 2*workers*each)
	}
	if got := sqlcas.ExclusiveBlocks() - before; mariadb && got != workers*each {
		t.Fatalf("%d of %d exclusive updates committed as a block", got, workers*each)
	}
}

// TestCommitExclusiveBlock: on MariaDB an exclusive commit of keys that
// all have rows reads them once, locked, and writes and commits in one
// compound statement; ops checked against a stale version write nothing;
// a key without a row takes the general way; and transfers mixing
// exclusive and optimistic commits keep the total.
func TestCommitExclusiveBlock(t *testing.T) {
	ctx := context.Background()
	store, mariadb, vs := blockStore(t)
	before := sqlcas.ExclusiveBlocks()
	got, err := store.CommitExclusive(ctx, []string{"b", "a"}, func(cur []cas.Item) ([]cas.Op, error) {
		return []cas.Op{cas.Put("b", cur[0].Version, []byte("0")), cas.Put("a", cur[1].Version, []byte("2"))}, nil
	})
	if err != nil || got[0] != vs[1]+1 || got[1] != vs[0]+1 {
		t.Fatalf("exclusive commit: %v, %v; want b v%d, a v%d", got, err, vs[1]+1, vs[0]+1)
	}
	if n := sqlcas.ExclusiveBlocks() - before; (n == 1) != mariadb {
		t.Fatalf("%d exclusive commits ran as a block; the server is MariaDB: %v", n, mariadb)
	}
	// MariaDB's transactions hold hot keys at once (cas.HotCommitHint).
	if w := store.HotCommitFor(); (w > 0) != mariadb {
		t.Fatalf("hot-commit window %v; the server is MariaDB: %v", w, mariadb)
	}
	// A stale expected version: a conflict carrying the held row, and
	// nothing written.
	_, err = store.CommitExclusive(ctx, []string{"a", "b"}, func(cur []cas.Item) ([]cas.Op, error) {
		return []cas.Op{cas.Put("a", cur[0].Version, []byte("9")), cas.Put("b", vs[1], []byte("9"))}, nil
	})
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || ce.Key != "b" || !ce.HasCurrent || ce.Current.Version != got[0] {
		t.Fatalf("stale exclusive commit: %v, want a conflict on b at v%d", err, got[0])
	}
	if it, _ := store.Get(ctx, "a"); string(it.Value) != "2" {
		t.Fatalf("a = %q after a refused commit, want \"2\"", it.Value)
	}
	// c has no row: created the general way.
	if _, err := store.CommitExclusive(ctx, []string{"a", "c"}, func(cur []cas.Item) ([]cas.Op, error) {
		return []cas.Op{cas.Put("a", cur[0].Version, []byte("1")), cas.Put("c", 0, []byte("1"))}, nil
	}); err != nil {
		t.Fatal(err)
	}

	// Transfers between a, b and c, half of the workers holding the rows:
	// the total stays 2.
	total := func() int {
		sum := 0
		for _, k := range []string{"a", "b", "c"} {
			it, err := store.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(string(it.Value))
			sum += n
		}
		return sum
	}
	if s := total(); s != 2 {
		t.Fatalf("total %d before the transfers, want 2", s)
	}
	const workers, each = 4, 30
	errs := make(chan error, 2*workers*each)
	var wg sync.WaitGroup
	move := func(from, to string) func(cur []cas.Item) ([]cas.Op, error) {
		return func(cur []cas.Item) ([]cas.Op, error) {
			f, _ := strconv.Atoi(string(cur[0].Value))
			g, _ := strconv.Atoi(string(cur[1].Value))
			return []cas.Op{
				cas.Put(from, cur[0].Version, []byte(strconv.Itoa(f-1))),
				cas.Put(to, cur[1].Version, []byte(strconv.Itoa(g+1))),
			}, nil
		}
	}
	pairs := [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}}
	for w := 0; w < workers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range each {
				p := pairs[(w+i)%len(pairs)]
				_, err := store.CommitExclusive(ctx, p[:], move(p[0], p[1]))
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			for i := range each {
				p := pairs[(w+i+1)%len(pairs)]
				errs <- occ.Retry(ctx, func(ctx context.Context) error {
					cur, err := store.GetMany(ctx, p[:])
					if err != nil {
						return err
					}
					ops, _ := move(p[0], p[1])(cur)
					_, err = store.Commit(ctx, ops)
					return err
				}, occ.WithMaxAttempts(1000))
			}
		}()
	}
	wg.Wait()
	noErrors(t, errs)
	if s := total(); s != 2 {
		t.Fatalf("total %d after the transfers, want 2", s)
	}
}

// TestExclusiveBlockLostReply cuts the reply to the compound statement
// that writes and commits an exclusive commit on MariaDB: the store reads
// the rows back by the write id and reports the commit applied, with its
// versions; the reply to an exclusive update's block, lost the same way,
// is resolved by its write id too.
func TestExclusiveBlockLostReply(t *testing.T) {
	ctx := context.Background()
	direct, viaProxy, p := proxied(t)
	directDB := mysqltest.Open(t, direct)
	if !isMariaDB(t, directDB) {
		t.Skip("MySQL runs no blocks")
	}
	store, v1 := storeWithK(t, directDB)
	v2, err := store.CompareAndSwap(ctx, "other", 0, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	// A first block, so that the store knows the server runs them.
	vs, err := store.CommitExclusive(ctx, []string{"k", "other"}, func(cur []cas.Item) ([]cas.Op, error) {
		return []cas.Op{cas.Put("k", v1, []byte("2")), cas.Put("other", v2, []byte("2"))}, nil
	})
	if err != nil || !store.RunsBlocks() {
		t.Fatalf("first exclusive commit: %v, as a block: %v", err, store.RunsBlocks())
	}
	// Statements through the proxy; the read-back (resolveCommit) on the
	// store's own pool, which the proxy does not cut.
	mine := store.With(openConn(t, mysqltest.Open(t, viaProxy)))
	restore := sqlcas.SetBeforeCommitHook(func() { p.CutAfter(1) })
	cuts := p.Cuts()
	got, err := mine.CommitExclusive(ctx, []string{"k", "other"}, func(cur []cas.Item) ([]cas.Op, error) {
		return []cas.Op{cas.Put("k", cur[0].Version, []byte("3")), cas.Put("other", cur[1].Version, []byte("1"))}, nil
	})
	p.CutAfter(0)
	restore()
	if p.Cuts() == cuts {
		t.Fatal("the proxy cut nothing: no reply was lost")
	}
	if err != nil || len(got) != 2 || got[0] != vs[0]+1 || got[1] != vs[1]+1 {
		t.Fatalf("exclusive commit whose reply was lost = %v, %v; want it resolved as applied at v%d and v%d", got, err, vs[0]+1, vs[1]+1)
	}
	for i, k := range []string{"k", "other"} {
		if it, err := store.Get(ctx, k); err != nil || it.Version != got[i] || string(it.Value) != []string{"3", "1"}[i] {
			t.Fatalf("%s = %+v, %v; want the commit's value at v%d", k, it, err, got[i])
		}
	}

	mine = store.With(openConn(t, mysqltest.Open(t, viaProxy)))
	restore = sqlcas.SetBeforeCommitHook(func() { p.CutAfter(1) })
	cuts = p.Cuts()
	v, err := mine.UpdateExclusive(ctx, "k", func(cur cas.Item) ([]byte, bool, error) { return []byte("4"), true, nil })
	p.CutAfter(0)
	restore()
	if p.Cuts() == cuts || err != nil || v != got[0]+1 {
		t.Fatalf("exclusive update whose reply was lost (%d cuts): v%d, %v; want it resolved as applied at v%d", p.Cuts()-cuts, v, err, got[0]+1)
	}
	if it, err := store.Get(ctx, "k"); err != nil || string(it.Value) != "4" || it.Version != v {
		t.Fatalf("k = %+v, %v; want the update applied (4 at v%d)", it, err, v)
	}
}

// TestModifyManyExclusiveBlock: on MariaDB, ModifyMany's exclusive
// commit (a transaction that keeps losing, or one on hot rows) reads the
// rows in one locking statement and writes and commits them in one
// compound statement. Two tables on the same rows (two processes' worth:
// each its own turns) transfer between them concurrently; the total
// stays, and some commits ran that way.
func TestModifyManyExclusiveBlock(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.DB(t)
	if !isMariaDB(t, db) {
		t.Skip("MySQL runs no blocks")
	}
	a := twoAccounts(t, db)
	b, err := sqlcas.NewTable[txntest.Account](db, sqlcas.TableConfig{Dialect: sqlcas.MySQL, Table: "accounts"})
	if err != nil {
		t.Fatal(err)
	}
	before := sqlcas.ExclusiveBlocks()
	const workers, each = 4, 40
	errs := make(chan error, 2*workers*each)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		for i, tbl := range []*sqlcas.Table[txntest.Account]{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				keys := []any{int64(1), int64(2)}
				if (w+i)%2 == 1 {
					keys = []any{int64(2), int64(1)}
				}
				for range each {
					_, err := tbl.ModifyMany(ctx, keys, moveOneAccount, occ.WithMaxAttempts(1000))
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	noErrors(t, errs)
	var total int64
	for id := int64(1); id <= 2; id++ {
		acc, err := a.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		total += acc.Balance
	}
	if total != 200 {
		t.Fatalf("total %d after the transfers, want 200", total)
	}
	if sqlcas.ExclusiveBlocks() == before {
		t.Fatal("no exclusive commit of the tables ran as one block")
	}
}

// noErrors closes errs and fails t at its first error.
func noErrors(t *testing.T, errs chan error) {
	t.Helper()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
