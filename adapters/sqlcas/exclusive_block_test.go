package sqlcas_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
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
	// lock wait could end.
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
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n, _, err := ctr.Get(ctx, "n")
	if err != nil || n != 2*workers*each {
		t.Fatalf("n = %d, %v; want %d", n, err, 2*workers*each)
	}
	if got := sqlcas.ExclusiveBlocks() - before; mariadb && got != workers*each {
		t.Fatalf("%d of %d exclusive updates committed as a block", got, workers*each)
	}
}
