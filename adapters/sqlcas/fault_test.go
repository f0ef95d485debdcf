package sqlcas_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/faultproxy"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/occ"
)

// proxied returns a MariaDB database reached directly and the same
// database reached through a fault proxy, and the proxy.
func proxied(t *testing.T) (direct *mysql.Config, viaProxy *mysql.Config, p *faultproxy.Proxy) {
	t.Helper()
	direct = mysqltest.Database(t)
	p, err := faultproxy.New(direct.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	viaProxy = direct.Clone()
	viaProxy.Addr = p.Addr()
	viaProxy.Timeout = 2 * time.Second
	return direct, viaProxy, p
}

// TestLostReplyResolved cuts the connection right after the server
// started answering a write (the write applied, its reply is lost): the
// store reads the row back through another connection, finds its write
// id, and reports success with the right version. Once for a
// CompareAndSwap and once for a Commit (the reply to its COMMIT is lost).
func TestLostReplyResolved(t *testing.T) {
	ctx := context.Background()
	direct, viaProxy, p := proxied(t)
	store, v1 := storeWithK(t, mysqltest.Open(t, direct))
	proxyDB := mysqltest.Open(t, viaProxy)

	conn := openConn(t, proxyDB)
	p.CutAfter(1) // the next answer on every proxied connection stops after 1 byte
	v2, err := store.With(conn).CompareAndSwap(ctx, "k", v1, []byte("2"))
	p.CutAfter(0)
	if p.Cuts() == 0 {
		t.Fatal("the proxy cut nothing: the test did not lose a reply")
	}
	if err != nil || v2 <= v1 {
		t.Fatalf("write whose reply was lost = v%d, %v; want it resolved as applied", v2, err)
	}
	it, err := store.Get(ctx, "k")
	if err != nil || string(it.Value) != "2" || it.Version != v2 {
		t.Fatalf("get = %+v, %v; want value 2 at v%d", it, err, v2)
	}

	conn2 := openConn(t, proxyDB)
	cuts := p.Cuts()
	vs, err := commitWithLostCommitReply(ctx, t, store, conn2, p)
	if p.Cuts() == cuts {
		t.Fatal("the proxy cut nothing during the commit")
	}
	if err != nil || len(vs) != 2 || vs[0] <= v2 {
		t.Fatalf("commit whose COMMIT reply was lost = %v, %v; want it resolved as applied", vs, err)
	}
	it, _ = store.Get(ctx, "k")
	if string(it.Value) != "3" || it.Version != vs[0] {
		t.Fatalf("after the commit: %+v, want value 3 at v%d", it, vs[0])
	}
}

// storeWithK returns a MySQL store on db, its table created, and the
// version of the key "k" it wrote with value "1".
func storeWithK(t *testing.T, db *sql.DB) (*sqlcas.Store, cas.Version) {
	t.Helper()
	ctx := context.Background()
	store := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.MySQL})
	v1, err := store.CompareAndSwap(ctx, "k", 0, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	return store, v1
}

// openConn returns a connection of db, connected (closed in the
// cleanup).
func openConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// commitWithLostCommitReply runs a Commit on conn whose reply to COMMIT
// is lost: the store's own transaction on a *sql.Conn, with the cut armed
// by a statement hook just before COMMIT is sent.
func commitWithLostCommitReply(ctx context.Context, t *testing.T, store *sqlcas.Store, conn sqlcas.Querier, p *faultproxy.Proxy) ([]cas.Version, error) {
	t.Helper()
	cur, err := store.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	restore := sqlcas.SetBeforeCommitHook(func() { p.CutAfter(1) })
	defer restore()
	defer p.CutAfter(0)
	return store.With(conn).Commit(ctx, []cas.Op{cas.Put("k", cur.Version, []byte("3")), cas.Put("other", 0, []byte("x"))})
}

// TestLostReplyAmbiguous loses the reply to a write while every
// connection to the server is cut, so that the store cannot read the row
// back: it returns a *cas.AmbiguousError naming the write id, and the row
// shows that the write did apply, tagged with that id.
func TestLostReplyAmbiguous(t *testing.T) {
	ctx := context.Background()
	direct, viaProxy, p := proxied(t)
	directDB := mysqltest.Open(t, direct)
	store, v1 := storeWithK(t, mysqltest.Open(t, viaProxy))
	p.CutAfter(1)
	_, err := store.CompareAndSwap(ctx, "k", v1, []byte("2"))
	p.CutAfter(0)
	var amb *cas.AmbiguousError
	if !errors.As(err, &amb) || amb.WriteID == "" {
		t.Fatalf("write with its reply lost and no way to read back: %v, want a *cas.AmbiguousError with the write id", err)
	}
	if sqlcas.Retryable(err) {
		t.Fatal("an ambiguous write is classified retryable")
	}
	var value string
	var id []byte
	if err := directDB.QueryRowContext(ctx, "SELECT value, write_id FROM occkit_cas WHERE k = 'k'").Scan(&value, &id); err != nil {
		t.Fatal(err)
	}
	if value != "2" || !strings.EqualFold(hexOf(id), amb.WriteID) {
		t.Fatalf("row = %q, write id %x; want the write applied with id %s", value, id, amb.WriteID)
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestFaultsNoDoubleApply runs increments (occ.Update of one key) and
// paired increments (occ.Txn of two keys, a Commit) through a proxy that
// keeps dropping connections and cutting answers. Every call ends as a
// success, an ambiguous write, or a failure that applied nothing; at the
// end the counters lie between the successes and the successes plus the
// ambiguous calls (nothing lost, nothing applied twice), and the two
// paired keys are equal (a Commit applies whole or not at all).
func TestFaultsNoDoubleApply(t *testing.T) {
	ctx := context.Background()
	direct, viaProxy, p := proxied(t)
	directDB := mysqltest.Open(t, direct)
	viaDB := mysqltest.Open(t, viaProxy)
	store, err := sqlcas.New(viaDB, sqlcas.Config{Dialect: sqlcas.MySQL})
	if err != nil {
		t.Fatal(err)
	}
	check, _ := sqlcas.New(directDB, sqlcas.Config{Dialect: sqlcas.MySQL})
	if err := check.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	counter := cas.NewTyped(store, cas.JSON[int]())

	stop := make(chan struct{})
	var faults sync.WaitGroup
	faults.Add(1)
	go func() {
		defer faults.Done()
		r := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				p.CutAfter(0)
				return
			case <-time.After(time.Duration(2+r.IntN(8)) * time.Millisecond):
			}
			if r.IntN(2) == 0 {
				p.DropAll()
			} else {
				p.CutAfter(int64(1 + r.IntN(300)))
				time.Sleep(time.Millisecond)
				p.CutAfter(0)
			}
		}
	}()

	type tally struct{ ok, ambiguous, failed int }
	var mu sync.Mutex
	var single, paired tally
	count := func(tl *tally, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			tl.ok++
		case errors.Is(err, cas.ErrAmbiguous):
			tl.ambiguous++
		default:
			tl.failed++
		}
	}
	opts := []occ.Option{occ.WithMaxAttempts(200), occ.WithRetryable(sqlcas.Retryable)}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if w%2 == 0 {
					_, _, err := occ.Update(ctx, counter, "c", func(n int, _ bool) (int, error) { return n + 1, nil }, opts...)
					count(&single, err)
					continue
				}
				err := occ.Txn(ctx, store, func(tx *occ.Tx) error {
					for _, k := range []string{"a", "b"} {
						v, _, err := tx.Get(k)
						if err != nil {
							return err
						}
						tx.Put(k, bump(v))
					}
					return nil
				}, opts...)
				count(&paired, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	faults.Wait()

	accepted, dropped := p.Stats()
	t.Logf("single %+v, paired %+v; proxy: %d connections, %d dropped, %d cuts", single, paired, accepted, dropped, p.Cuts())
	if dropped+p.Cuts() == 0 {
		t.Fatal("no fault struck")
	}
	read := func(k string) int {
		it, err := check.Get(ctx, k)
		if errors.Is(err, cas.ErrNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		if k == "c" {
			var n int
			if err := cas.JSON[int]().Unmarshal(it.Value, &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		return int(binary.BigEndian.Uint64(it.Value))
	}
	c, a, b := read("c"), read("a"), read("b")
	if c < single.ok || c > single.ok+single.ambiguous {
		t.Errorf("counter = %d after %d successful and %d ambiguous increments: lost or applied twice", c, single.ok, single.ambiguous)
	}
	if a != b {
		t.Errorf("paired keys a = %d, b = %d: a commit applied in part", a, b)
	}
	if a < paired.ok || a > paired.ok+paired.ambiguous {
		t.Errorf("paired counter = %d after %d successful and %d ambiguous commits: lost or applied twice", a, paired.ok, paired.ambiguous)
	}
}

// bump returns v (a big-endian uint64, or nothing) plus 1.
func bump(v []byte) []byte {
	var n uint64
	if len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	out := make([]byte, 8)
	binary.BigEndian.PutUint64(out, n+1)
	return out
}
