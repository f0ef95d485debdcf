package rowupdate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/occkit/occkit/cas"
)

type layoutBase struct {
	ID int64 `db:"id"`
}

type layoutRow struct {
	layoutBase
	Name    string `db:"name"`
	Stock   *int64 `db:"stock"`
	Version uint32 `db:"version"`
	Fence   int64  `db:"fence_token"`
	Skipped string `db:"-"`
}

func quoteName(name string) (string, error) { return `"` + name + `"`, nil }

func TestLayout(t *testing.T) {
	l, err := NewLayout[layoutRow](quoteName, "", "", "fence_token")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.SelectList(); got != `"id", "name", "stock", "version", "fence_token"` {
		t.Fatalf("SelectList = %s", got)
	}
	if l.KeyColumn().Name != "id" || l.VersionColumn().Name != "version" || l.Columns[l.Fence].Name != "fence_token" {
		t.Fatalf("roles: %+v", l)
	}
	var writable []string
	for i, c := range l.Columns {
		if l.Writable(i) {
			writable = append(writable, c.Name)
		}
	}
	if strings.Join(writable, ",") != "name,stock" {
		t.Fatalf("writable columns: %v", writable)
	}
	row := layoutRow{layoutBase: layoutBase{ID: 7}, Version: 3}
	if l.KeyOf(&row) != int64(7) || l.VersionOf(&row) != 3 || l.Row(row).Version != 3 {
		t.Fatalf("KeyOf, VersionOf, Row of %+v", row)
	}
	l.SetVersion(&row, 9)
	if row.Version != 9 {
		t.Fatalf("SetVersion: %d", row.Version)
	}
	if got := len(l.Targets(&row)); got != len(l.Columns) {
		t.Fatalf("%d targets for %d columns", got, len(l.Columns))
	}

	for _, tc := range []struct{ name, key, version, fence string }{
		{"no key field", "missing", "", ""},
		{"a version field of text", "", "name", ""},
		{"the key as version", "", "id", ""},
	} {
		if _, err := NewLayout[layoutRow](quoteName, tc.key, tc.version, tc.fence); err == nil {
			t.Errorf("%s: NewLayout succeeded", tc.name)
		}
	}
	if _, err := NewLayout[int](quoteName, "", "", ""); err == nil {
		t.Error("NewLayout of an int succeeded")
	}
}

func TestLayoutDelta(t *testing.T) {
	l, err := NewLayout[layoutRow](quoteName, "", "", "fence_token")
	if err != nil {
		t.Fatal(err)
	}
	b := cas.Between(0, 10)
	col, lo, hi, err := l.Delta(context.Background(), "pkg", "t", 7, "stock", 2, b)
	if err != nil || l.Columns[col].Name != "stock" || lo != -2 || hi != 8 {
		t.Fatalf("Delta = %d, %d, %d, %v", col, lo, hi, err)
	}
	for _, column := range []string{"version", "name", "nope"} {
		if _, _, _, err := l.Delta(context.Background(), "pkg", "t", 7, column, 2, b); err == nil || !strings.HasPrefix(err.Error(), "pkg: Add: ") {
			t.Errorf("Delta of column %s: %v", column, err)
		}
	}
	var row layoutRow
	if err := l.DeltaRefused(&row, col, 7, 2, b); !errors.Is(err, cas.ErrNotInteger) {
		t.Fatalf("DeltaRefused of a NULL column: %v", err)
	}
	stock := int64(9)
	row.Stock = &stock
	var be *cas.BoundError
	if err := l.DeltaRefused(&row, col, 7, 2, b); !errors.As(err, &be) || !be.HasCurrent || be.Current != 9 {
		t.Fatalf("DeltaRefused of 9 + 2: %v", err)
	}
}
