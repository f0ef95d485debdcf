package pgtest

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// WantMissingSequence checks the errors of writes (by operation: "insert",
// "update", ...) to a table whose version sequence was never created: each
// write failed, its error says every one of says, and PostgreSQL's own
// error (SQLSTATE 42P01, undefined_table) is reachable with errors.As.
func WantMissingSequence(t testing.TB, errs map[string]error, says ...string) {
	t.Helper()
	for op, err := range errs {
		if err == nil {
			t.Fatalf("%s without the version sequence succeeded", op)
		}
		msg := err.Error()
		for _, want := range says {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: the error does not say %q: %v", op, want, err)
			}
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
			t.Errorf("%s: the *pgconn.PgError (42P01) is not reachable with errors.As: %v", op, err)
		}
	}
}
