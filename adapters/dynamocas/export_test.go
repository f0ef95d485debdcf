package dynamocas

import (
	"context"

	"github.com/occkit/occkit/internal/rowupdate"
)

// ExclusiveModify runs t's exclusive read-modify-write of the item with
// key (Modify's escalation) directly, for the tests: fn gets the item
// (exists false when absent) and returns what to write.
func (t *Table[T]) ExclusiveModify(ctx context.Context, key Key, fn func(cur T, exists bool) (T, bool, error)) (T, error) {
	stored, err := t.exclusive(ctx, key, func(cur rowupdate.Row[T]) (T, bool, error) {
		return fn(cur.Value, cur.Version != 0)
	})
	return stored.Value, err
}

// MaxUnexplainedRefusals is how many refusals of unknown reason Table.Add
// takes before it returns the last one.
const MaxUnexplainedRefusals = maxUnexplainedRefusals
