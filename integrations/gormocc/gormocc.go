package gormocc

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/occkit/occkit/cas"
)

// Version is the type of a model's version field: a field of this type
// makes every write of the model conditional on it. The column is a
// 64-bit integer.
type Version uint64

// CAS returns v as a cas.Version (for an ETag, say).
func (v Version) CAS() cas.Version { return cas.Version(v) }

var (
	// ErrNoVersion reports a write of a versioned model that has a primary
	// key but no version: it was not read from the database, so nothing
	// says which state the write is meant to replace. Read it first, or
	// Create it.
	ErrNoVersion = errors.New("gormocc: versioned model has no version (read it from the database first, or Create it)")

	// ErrUpsert reports an upsert (an ON CONFLICT ... DO UPDATE clause, as
	// Save of a slice adds) of a versioned model: it would overwrite a row
	// whatever its version.
	ErrUpsert = errors.New("gormocc: upsert of a versioned model would overwrite any version")
)

// Plugin registers the version checks on a *gorm.DB: db.Use(Plugin{}).
// Models without a Version field are not affected. The zero value is
// ready to use.
type Plugin struct{}

// Name implements gorm.Plugin.
func (Plugin) Name() string { return "occkit:gormocc" }

// Initialize implements gorm.Plugin: it registers the callbacks.
func (Plugin) Initialize(db *gorm.DB) error {
	cb := db.Callback()
	for _, r := range []struct {
		err error
	}{
		{cb.Create().Before("gorm:create").Register("gormocc:before_create", beforeCreate)},
		{cb.Update().Before("gorm:update").Register("gormocc:before_update", beforeUpdate)},
		{cb.Update().After("gorm:update").Register("gormocc:after_update", afterWrite)},
		{cb.Delete().Before("gorm:delete").Register("gormocc:before_delete", beforeDelete)},
		{cb.Delete().After("gorm:delete").Register("gormocc:after_delete", afterWrite)},
	} {
		if r.err != nil {
			return fmt.Errorf("gormocc: register callbacks: %w", r.err)
		}
	}
	return nil
}

// Keys of the statement settings that carry a write's check from its
// before callback to its after callback.
const (
	settingCheck = "gormocc:check"
	settingSet   = "gormocc:set"
)

// check is a conditional write in flight.
type check struct {
	field    *schema.Field
	expected Version
	next     Version // 0 for a delete
}

var versionType = reflect.TypeOf(Version(0))

// versionField returns the schema's Version field, or nil.
func versionField(s *schema.Schema) *schema.Field {
	if s == nil {
		return nil
	}
	for _, f := range s.Fields {
		if f.DBName != "" && f.FieldType == versionType {
			return f
		}
	}
	return nil
}

// oneRow reports whether the statement writes one model with its whole
// primary key set.
func oneRow(stmt *gorm.Statement) bool {
	if stmt.ReflectValue.Kind() != reflect.Struct || len(stmt.Schema.PrimaryFields) == 0 {
		return false
	}
	for _, pf := range stmt.Schema.PrimaryFields {
		if _, zero := pf.ValueOf(stmt.Context, stmt.ReflectValue); zero {
			return false
		}
	}
	return true
}

func versionOf(stmt *gorm.Statement, f *schema.Field) Version {
	v, _ := f.ValueOf(stmt.Context, stmt.ReflectValue)
	n, _ := v.(Version)
	return n
}

// initialVersion is a new row's version: the time in nanoseconds, larger
// than any version a row deleted earlier under the same key can have had.
func initialVersion() Version {
	if n := time.Now().UnixNano(); n > 0 {
		return Version(n)
	}
	return 1
}

func beforeCreate(db *gorm.DB) {
	stmt := db.Statement
	if db.Error != nil || stmt.Schema == nil {
		return
	}
	f := versionField(stmt.Schema)
	if f == nil {
		return
	}
	if c, ok := stmt.Clauses["ON CONFLICT"]; ok {
		if oc, ok := c.Expression.(clause.OnConflict); ok && (oc.UpdateAll || len(oc.DoUpdates) > 0) {
			_ = db.AddError(fmt.Errorf("%w (table %s)", ErrUpsert, stmt.Table))
			return
		}
	}
	v := initialVersion()
	set := func(rv reflect.Value) {
		if cur, _ := f.ValueOf(stmt.Context, rv); cur == Version(0) {
			_ = db.AddError(f.Set(stmt.Context, rv, v))
		}
	}
	switch stmt.ReflectValue.Kind() {
	case reflect.Struct:
		set(stmt.ReflectValue)
	case reflect.Slice, reflect.Array:
		for i := 0; i < stmt.ReflectValue.Len(); i++ {
			set(reflect.Indirect(stmt.ReflectValue.Index(i)))
		}
	}
}

func beforeUpdate(db *gorm.DB) {
	stmt := db.Statement
	if db.Error != nil || stmt.Schema == nil || stmt.SQL.Len() != 0 {
		return
	}
	f := versionField(stmt.Schema)
	if f == nil {
		return
	}
	var set clause.Set
	if c, ok := stmt.Clauses["SET"]; ok {
		set, _ = c.Expression.(clause.Set)
	} else {
		set = callbacks.ConvertToAssignments(stmt)
		if db.Error != nil || len(set) == 0 {
			return // nothing to write: gorm writes nothing either
		}
	}
	// The version is the plugin's to write.
	kept := set[:0:0]
	for _, a := range set {
		if a.Column.Name != f.DBName {
			kept = append(kept, a)
		}
	}
	if !oneRow(stmt) {
		// A batch: no single version to check; move every row's version.
		kept = append(kept, clause.Assignment{Column: clause.Column{Name: f.DBName},
			Value: clause.Expr{SQL: "? + 1", Vars: []any{clause.Column{Name: f.DBName}}}})
		stmt.AddClause(kept)
		stmt.Settings.Store(settingSet, true)
		return
	}
	cur := versionOf(stmt, f)
	if cur == 0 {
		_ = db.AddError(fmt.Errorf("%w: %s", ErrNoVersion, rowKey(stmt)))
		return
	}
	next := cur + 1
	kept = append(kept, clause.Assignment{Column: clause.Column{Name: f.DBName}, Value: next})
	stmt.AddClause(kept)
	stmt.AddClause(clause.Where{Exprs: []clause.Expression{clause.Eq{Column: clause.Column{Table: clause.CurrentTable, Name: f.DBName}, Value: cur}}})
	stmt.Settings.Store(settingSet, true)
	stmt.Settings.Store(settingCheck, check{field: f, expected: cur, next: next})
}

func beforeDelete(db *gorm.DB) {
	stmt := db.Statement
	if db.Error != nil || stmt.Schema == nil || stmt.SQL.Len() != 0 {
		return
	}
	f := versionField(stmt.Schema)
	if f == nil || !oneRow(stmt) {
		return
	}
	cur := versionOf(stmt, f)
	if cur == 0 {
		_ = db.AddError(fmt.Errorf("%w: %s", ErrNoVersion, rowKey(stmt)))
		return
	}
	stmt.AddClause(clause.Where{Exprs: []clause.Expression{clause.Eq{Column: clause.Column{Table: clause.CurrentTable, Name: f.DBName}, Value: cur}}})
	stmt.Settings.Store(settingCheck, check{field: f, expected: cur})
}

// afterWrite turns a conditional write that matched no row into a
// conflict, and hands the new version to the model after a success.
func afterWrite(db *gorm.DB) {
	stmt := db.Statement
	if _, ok := stmt.Settings.LoadAndDelete(settingSet); ok {
		delete(stmt.Clauses, "SET") // ours: the statement may be reused
	}
	v, ok := stmt.Settings.LoadAndDelete(settingCheck)
	if !ok || db.Error != nil || db.DryRun {
		return
	}
	c := v.(check)
	if db.RowsAffected == 0 {
		_ = db.AddError(conflict(db, c))
		return
	}
	if c.next != 0 {
		_ = db.AddError(c.field.Set(stmt.Context, stmt.ReflectValue, c.next))
	}
}

// conflict builds the *cas.ConflictError of a write that matched no row,
// with the row's current version when it can be read.
func conflict(db *gorm.DB, c check) error {
	stmt := db.Statement
	key := rowKey(stmt)
	ce := &cas.ConflictError{Key: key, Expected: c.expected.CAS()}
	// The row as a reader of the model sees it (soft-deleted rows are gone).
	q := db.Session(&gorm.Session{NewDB: true, SkipHooks: true}).Model(reflect.New(stmt.Schema.ModelType).Interface())
	for _, pf := range stmt.Schema.PrimaryFields {
		v, _ := pf.ValueOf(stmt.Context, stmt.ReflectValue)
		q = q.Where(clause.Eq{Column: clause.Column{Table: clause.CurrentTable, Name: pf.DBName}, Value: v})
	}
	var found []Version
	if err := q.Limit(1).Pluck(c.field.DBName, &found).Error; err == nil {
		ce.HasCurrent = true
		ce.Current.Key = key
		if len(found) > 0 {
			ce.Current.Version = found[0].CAS()
		}
	}
	return ce
}

// rowKey names the row a statement writes: table/primary key values.
func rowKey(stmt *gorm.Statement) string {
	parts := []string{stmt.Table}
	if stmt.ReflectValue.Kind() == reflect.Struct {
		for _, pf := range stmt.Schema.PrimaryFields {
			v, _ := pf.ValueOf(stmt.Context, stmt.ReflectValue)
			parts = append(parts, fmt.Sprint(v))
		}
	}
	return strings.Join(parts, "/")
}
