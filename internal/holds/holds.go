// Package holds has the parts of UpdateExclusive and CommitExclusive
// (cas.Exclusive, cas.ExclusiveCommitter) that adapters holding keys with
// a token of their own share: dynamocas, etcdcas and rediscas hold a key
// by writing a hold beside it, and must end every hold they took on
// every path out, a panic in the caller's function included (best
// effort: a hold expires anyway).
package holds

import (
	"context"
	"slices"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
)

// Next runs fn, the function of an UpdateExclusive, on cur, the item of
// key while the caller holds it, and checks a value to write against
// limits. It returns write true and no error when the caller should
// write next; otherwise (fn failed, panicked, wrote nothing, or next is
// over the limits) release has run, and the caller returns cur.Version
// and err.
func Next(ctx context.Context, limits cas.Limits, key string, cur cas.Item, fn func(cas.Item) ([]byte, bool, error), release func()) (next []byte, write bool, err error) {
	next, write, err = ctxwait.Guard(release, func() ([]byte, bool, error) { return fn(cur) })
	if err == nil && write {
		err = limits.Put(ctx, key, next)
	}
	if err != nil || !write {
		release()
		return nil, false, err
	}
	return next, true, nil
}

// Commit runs a CommitExclusive whose holds are taken one key at a time:
// it takes the hold of each of keys in key order with take (so that two
// callers cannot wait for each other), calls fn with the items take
// returned in the order of keys, and sends fn's ops with commit, which
// gets the items by key. On every path out, a panic in fn included,
// release gets the keys whose hold the commit did not end: all those
// taken, or whose take failed (a lost answer may have taken it), but the
// keys the ops of a successful commit write. Keys must be distinct.
func Commit(keys []string,
	take func(key string) (cas.Item, error),
	fn func(cur []cas.Item) ([]cas.Op, error),
	commit func(ops []cas.Op, cur map[string]cas.Item) ([]cas.Version, error),
	release func(keys []string),
) ([]cas.Version, error) {
	var held []string
	written := map[string]bool{}
	defer func() {
		var left []string
		for _, k := range held {
			if !written[k] {
				left = append(left, k)
			}
		}
		if len(left) > 0 {
			release(left)
		}
	}()
	found := make(map[string]cas.Item, len(keys))
	for _, k := range slices.Sorted(slices.Values(keys)) {
		held = append(held, k) // before: a lost answer may have taken it
		it, err := take(k)
		if err != nil {
			return nil, err
		}
		found[k] = it
	}
	cur := make([]cas.Item, len(keys))
	for i, k := range keys {
		cur[i] = found[k]
	}
	ops, err := fn(cur)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	vs, err := commit(ops, found)
	if err == nil {
		for _, o := range ops {
			if o.Kind != cas.OpCheck {
				written[o.Key] = true // the commit ended their holds
			}
		}
	}
	return vs, err
}
