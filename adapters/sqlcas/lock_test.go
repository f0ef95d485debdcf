package sqlcas_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/internal/mysqltest"
)

const checkInterval = 200 * time.Millisecond

func TestLockerConformance(t *testing.T) {
	lockertest.Run(t, lockertest.Harness{
		NewLockers: func(t *testing.T, n int) []hybrid.Locker {
			cfg := mysqltest.Database(t)
			var out []hybrid.Locker
			for i := range n {
				// Each locker is a process of its own: its own pool.
				l, err := sqlcas.NewLocker(mysqltest.Open(t, cfg), sqlcas.LockerConfig{CheckInterval: checkInterval})
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					if err := l.CreateTokenTable(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				t.Cleanup(func() { _ = l.Close() })
				out = append(out, l)
			}
			return out
		},
		TTL:    checkInterval,
		Renews: true,
		LoseLease: func(t *testing.T, g hybrid.Lease) {
			killSession(t, g.(*sqlcas.Lease))
		},
		NewStore: func(t *testing.T) cas.FencedStore { return newStore(t, sqlcas.MySQL, sqlcas.Config{}) },
	})
}

// killSession ends, from another connection, the session holding the
// lease's named lock (as a server restart or a dropped connection would).
func killSession(t *testing.T, le *sqlcas.Lease) {
	t.Helper()
	ctx := context.Background()
	db := mysqltest.Open(t, mysqltest.Config(t))
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, le.Name()).Scan(&id); err != nil || !id.Valid {
		t.Fatalf("holder of %s: %v, %v", le.Name(), id, err)
	}
	if _, err := db.ExecContext(ctx, `KILL ?`, id.Int64); err != nil {
		t.Fatal(err)
	}
}
