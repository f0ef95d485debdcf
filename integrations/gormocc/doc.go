// Package gormocc makes GORM writes conditional on a version column, so
// that two requests that read the same row cannot both write it: the
// second write fails with a conflict instead of silently overwriting the
// first.
//
// # Use
//
// Give the model a field of type [Version] and register the plugin once:
//
//	type Item struct {
//		ID      uint
//		Name    string
//		Stock   int
//		Version gormocc.Version
//	}
//
//	db.Use(gormocc.Plugin{})
//
// Then, for a model read from the database (its version known):
//   - Save, Updates, Update, UpdateColumn(s) write only if the row's
//     version is still the model's, and set the version to a new value; on
//     success the model holds the new version, ready for the next write;
//   - Delete deletes only if the row's version is still the model's;
//   - a write whose version is stale fails with an error matching
//     cas.ErrConflict: a *cas.ConflictError naming the row (table/primary
//     key), the version expected and the row's current version (0 and
//     errors.Is(err, cas.ErrNotFound) when the row is gone). It is never a
//     silent no-op with RowsAffected == 0, and Save never falls back to an
//     upsert over the newer row.
//
// Create sets the version. [Update] is the read-modify-write loop: read the
// row, apply a change, save it, and on a conflict read again and redo,
// with occ's backoff and limits.
//
// # What is not version-checked
//
// A write with no single row to check cannot be conditional: a batch
// update by conditions (db.Model(&Item{}).Where(...).Updates(...)) or of
// a slice, or a delete by conditions, writes without a condition but still
// moves the version of every row it touches (so that optimistic writers of
// those rows conflict). A write of a model with a primary key but no
// version (it was not read from the database) fails with [ErrNoVersion];
// an upsert (ON CONFLICT DO UPDATE, Save of a slice) of a versioned model
// fails with [ErrUpsert].
//
// # Versions
//
// A new row's version is the creation time in nanoseconds and every write
// adds one, so that a row deleted and created again with the same primary
// key never repeats a version an old reader may hold (no ABA), as
// occkit's stores promise. Versions fit in a signed 64-bit column.
package gormocc
