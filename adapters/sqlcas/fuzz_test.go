package sqlcas_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
)

// FuzzTableNameSQLite gives the store arbitrary table names on SQLite: a
// name New accepts must become exactly one table of exactly that name,
// whatever quotes, semicolons or placeholders it holds.
func FuzzTableNameSQLite(f *testing.F) {
	for _, seed := range []string{"t", `a"b`, "x`; DROP TABLE y; --", "?", "$1", "@k", "{T}", `""`, " sp ", "ünï"} {
		f.Add(seed)
	}
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(f.TempDir(), "fuzz.db")))
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, name string) {
		s, err := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.SQLite, Table: name})
		if err != nil {
			if name != "" && utf8.ValidString(name) && !strings.ContainsRune(name, 0) && len(name) <= 1024 {
				t.Fatalf("New refused %q: %v", name, err)
			}
			return
		}
		want := name
		if want == "" {
			want = sqlcas.DefaultTable
		}
		if strings.HasPrefix(strings.ToLower(want), "sqlite_") {
			return // reserved by SQLite
		}
		if err := s.CreateTable(ctx); err != nil {
			t.Fatalf("create table %q: %v", name, err)
		}
		defer func() {
			for _, n := range []string{want, want + "_deltas"} {
				_, _ = db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+strings.ReplaceAll(n, `"`, `""`)+`"`)
			}
		}()
		if _, err := s.CompareAndSwap(ctx, "k", 0, []byte("v")); err != nil {
			t.Fatalf("write to table %q: %v", name, err)
		}
		// SQLite keeps no delta records (no reply is lost in process):
		// a delta needs no other table.
		wantTables := []string{want}
		if _, _, err := s.Add(ctx, "n", 1, cas.Bounds{}); err != nil {
			t.Fatalf("delta on table %q: %v", name, err)
		}
		var got []string
		rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			_ = rows.Scan(&n)
			got = append(got, n)
		}
		rows.Close()
		slices.Sort(got)
		slices.Sort(wantTables)
		if !slices.Equal(got, wantTables) {
			t.Fatalf("tables %q, want exactly %q", got, wantTables)
		}
	})
}
