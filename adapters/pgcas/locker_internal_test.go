package pgcas

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/internal/pgtest"
)

// TestLockerConformance runs hybrid/lockertest on Lockers of session and
// of transaction leases, each with a pool of its own (one process each),
// checking their leases every 100 ms. The lockers of a test share a token
// sequence in a fresh schema: the sequence is the locks' namespace. A lease
// is lost by ending its backend's session, as the server does to a client
// paused long enough for a keepalive or idle timeout to drop it.
func TestLockerConformance(t *testing.T) {
	const interval = 100 * time.Millisecond
	for _, xact := range []bool{false, true} {
		t.Run(map[bool]string{false: "Session", true: "Transaction"}[xact], func(t *testing.T) {
			schemas := map[*testing.T]string{}
			pool := func(t *testing.T) *pgxpool.Pool {
				// Waiting acquirers hold a connection each, and a
				// transaction lease's checks borrow one more.
				return pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 12 })
			}
			lockertest.Run(t, lockertest.Harness{
				NewLockers: func(t *testing.T, n int) []hybrid.Locker {
					ls := make([]hybrid.Locker, n)
					for i := range ls {
						p := pool(t)
						if i == 0 {
							var schema string
							if err := p.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
								t.Fatal(err)
							}
							schemas[t] = schema
						}
						l, err := NewLocker(p, LockerConfig{Schema: schemas[t], TokenCounter: "tokens", Transaction: xact, CheckInterval: interval})
						if err != nil {
							t.Fatal(err)
						}
						if i == 0 {
							if err := l.CreateTokenCounter(context.Background()); err != nil {
								t.Fatal(err)
							}
						}
						ls[i] = l
					}
					return ls
				},
				TTL:    interval,
				Renews: true,
				LoseLease: func(t *testing.T, g hybrid.Lease) {
					var ok bool
					admin := pool(t)
					if err := admin.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, int64(g.(*Lease).pid)).Scan(&ok); err != nil || !ok {
						t.Fatalf("terminating the backend of lease %d: %v, %v", g.Token(), ok, err)
					}
				},
				NewStore: func(t *testing.T) cas.FencedStore {
					s, err := New(pool(t), Config{})
					if err != nil {
						t.Fatal(err)
					}
					if err := s.CreateTable(context.Background()); err != nil {
						t.Fatal(err)
					}
					return s
				},
			})
		})
	}
}
