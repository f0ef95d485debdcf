package cas

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Default limits, used for any zero field of [Limits].
const (
	// DefaultMaxKeyBytes is the default longest key, in bytes.
	DefaultMaxKeyBytes = 1024
	// DefaultMaxValueBytes is the default largest value, in bytes.
	DefaultMaxValueBytes = 1 << 20
	// DefaultMaxCommitOps is the default largest number of ops in a commit.
	DefaultMaxCommitOps = 100
)

// Limits are the sizes a store accepts. Each adapter declares its own (the
// backend's request and item limits) and validates every request with them
// before sending anything, so all adapters reject bad input the same way.
// A zero field means the default. Limits is a plain value, safe to copy and
// to use concurrently.
type Limits struct {
	// MaxKeyBytes is the longest key, in bytes.
	MaxKeyBytes int
	// MaxValueBytes is the largest value, in bytes.
	MaxValueBytes int
	// MaxCommitOps is the largest number of operations in one Commit.
	MaxCommitOps int
	// MaxCommitBytes is the largest sum of key and value bytes in one
	// Commit; 0 means no limit beyond the per-value one.
	MaxCommitBytes int
}

func (l Limits) maxKey() int {
	if l.MaxKeyBytes > 0 {
		return l.MaxKeyBytes
	}
	return DefaultMaxKeyBytes
}

func (l Limits) maxValue() int {
	if l.MaxValueBytes > 0 {
		return l.MaxValueBytes
	}
	return DefaultMaxValueBytes
}

func (l Limits) maxOps() int {
	if l.MaxCommitOps > 0 {
		return l.MaxCommitOps
	}
	return DefaultMaxCommitOps
}

// Or returns l with every zero field set to d's: an adapter's defaults
// under the limits its Config sets.
func (l Limits) Or(d Limits) Limits {
	if l.MaxKeyBytes == 0 {
		l.MaxKeyBytes = d.MaxKeyBytes
	}
	if l.MaxValueBytes == 0 {
		l.MaxValueBytes = d.MaxValueBytes
	}
	if l.MaxCommitOps == 0 {
		l.MaxCommitOps = d.MaxCommitOps
	}
	if l.MaxCommitBytes == 0 {
		l.MaxCommitBytes = d.MaxCommitBytes
	}
	return l
}

// Within reports an error when a field of l is negative or above the same
// field of hard, a backend's hard maximum (a zero field of hard: no
// maximum). Adapters call it on the limits of their Config, so that a
// limit the backend could never honour fails at construction, not on the
// first large write.
func (l Limits) Within(hard Limits) error {
	for _, f := range []struct {
		name      string
		got, hard int
	}{
		{"MaxKeyBytes", l.MaxKeyBytes, hard.MaxKeyBytes},
		{"MaxValueBytes", l.MaxValueBytes, hard.MaxValueBytes},
		{"MaxCommitOps", l.MaxCommitOps, hard.MaxCommitOps},
		{"MaxCommitBytes", l.MaxCommitBytes, hard.MaxCommitBytes},
	} {
		switch {
		case f.got < 0:
			return fmt.Errorf("cas: Limits.%s is negative (%d)", f.name, f.got)
		case f.hard > 0 && f.got > f.hard:
			return fmt.Errorf("cas: Limits.%s %d is above the backend's maximum of %d", f.name, f.got, f.hard)
		}
	}
	return nil
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	return Limits{MaxKeyBytes: l.maxKey(), MaxValueBytes: l.maxValue(), MaxCommitOps: l.maxOps(), MaxCommitBytes: l.MaxCommitBytes}
}

// CheckKey validates a key: not empty, valid UTF-8, no NUL byte, at most
// MaxKeyBytes long. Keys are text so that every backend can hold them
// (PostgreSQL text columns refuse NUL, DynamoDB string keys must be UTF-8).
// The error matches ErrInvalidKey.
func (l Limits) CheckKey(op, key string) error {
	var why string
	switch {
	case key == "":
		why = "empty"
	case len(key) > l.maxKey():
		why = fmt.Sprintf("%d bytes, limit %d", len(key), l.maxKey())
	case !utf8.ValidString(key):
		why = "not valid UTF-8"
	case strings.IndexByte(key, 0) >= 0:
		why = "contains a NUL byte"
	default:
		return nil
	}
	return &KeyError{Op: op, Key: key, Err: fmt.Errorf("%w: %s", ErrInvalidKey, why)}
}

// CheckValue validates a value's size. The error matches ErrTooLarge.
func (l Limits) CheckValue(op, key string, value []byte) error {
	if len(value) > l.maxValue() {
		return &KeyError{Op: op, Key: key, Err: fmt.Errorf("%w: value is %d bytes, limit %d", ErrTooLarge, len(value), l.maxValue())}
	}
	return nil
}

// Get validates a Get: the context is not nil or done and the key is valid.
func (l Limits) Get(ctx context.Context, key string) error {
	return l.checkCall(ctx, "get", key)
}

// checkCall is the opening every single-key call shares: a nil context is
// a *KeyError naming op, a done context is its own error, unwrapped, so
// that errors.Is matches context.Canceled, and then the key is checked.
func (l Limits) checkCall(ctx context.Context, op, key string) error {
	if ctx == nil {
		return &KeyError{Op: op, Key: key, Err: ErrNilContext}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.CheckKey(op, key)
}

// GetMany validates a BatchGetter.GetMany: the context is not nil or done,
// every key is valid and appears once (ErrInvalidKey), and there are at
// most MaxCommitOps keys (ErrTooLarge).
func (l Limits) GetMany(ctx context.Context, keys []string) error {
	return l.keyList(ctx, "get-many", keys)
}

// CommitExclusive validates an ExclusiveCommitter.CommitExclusive: GetMany's
// checks, and at least one key (ErrInvalidCommit), since a commit that
// holds nothing has nothing to commit.
func (l Limits) CommitExclusive(ctx context.Context, keys []string) error {
	const op = "exclusive commit"
	if err := l.keyList(ctx, op, keys); err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("cas: %s: %w: no keys", op, ErrInvalidCommit)
	}
	return nil
}

// keyList is GetMany's checks, its errors naming op.
func (l Limits) keyList(ctx context.Context, op string, keys []string) error {
	if ctx == nil {
		return fmt.Errorf("cas: %s: %w", op, ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(keys) > l.maxOps() {
		return fmt.Errorf("cas: %s: %w: %d keys, limit %d", op, ErrTooLarge, len(keys), l.maxOps())
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if err := l.CheckKey(op, k); err != nil {
			return err
		}
		if _, dup := seen[k]; dup {
			return &KeyError{Op: op, Key: k, Err: fmt.Errorf("%w: the key appears twice", ErrInvalidKey)}
		}
		seen[k] = struct{}{}
	}
	return nil
}

// Add validates an Adder.Add of n within b: the context is not nil or
// done and the key is valid. It returns the range [lo, hi] of current
// values the delta accepts (b.Before(n)), and a *BoundError when there is
// none, so that a delta no value allows is refused before anything is
// sent.
func (l Limits) Add(ctx context.Context, key string, n int64, b Bounds) (lo, hi int64, err error) {
	if err := l.checkCall(ctx, "add", key); err != nil {
		return 0, 0, err
	}
	if lo, hi = b.Before(n); lo > hi {
		return 0, 0, &BoundError{Key: key, Add: n, Bounds: b}
	}
	return lo, hi, nil
}

// Put validates a CompareAndSwap: the context is not nil or done, the key
// is valid and the value fits.
func (l Limits) Put(ctx context.Context, key string, value []byte) error {
	if err := l.checkCall(ctx, "compare-and-swap", key); err != nil {
		return err
	}
	return l.CheckValue("compare-and-swap", key, value)
}

// Delete validates a CompareAndDelete: the context is not nil or done, the
// key is valid and expected is not 0.
func (l Limits) Delete(ctx context.Context, key string, expected Version) error {
	if err := l.checkCall(ctx, "compare-and-delete", key); err != nil {
		return err
	}
	if expected == 0 {
		return &KeyError{Op: "compare-and-delete", Key: key, Err: fmt.Errorf("%w: expected version 0 names a key that does not exist", ErrInvalidVersion)}
	}
	return nil
}

// Commit validates a Commit: the context is not nil or done, there is at least
// one op and at most MaxCommitOps, every key is valid and appears once, every
// value fits, no delete expects version 0, and the total size fits
// MaxCommitBytes.
func (l Limits) Commit(ctx context.Context, ops []Op) error {
	if ctx == nil {
		return fmt.Errorf("cas: commit: %w", ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ops) == 0 {
		return fmt.Errorf("cas: commit: %w: no operations", ErrInvalidCommit)
	}
	if len(ops) > l.maxOps() {
		return fmt.Errorf("cas: commit: %w: %d operations, limit %d", ErrTooLarge, len(ops), l.maxOps())
	}
	seen := make(map[string]struct{}, len(ops))
	total := 0
	for _, op := range ops {
		if err := l.CheckKey("commit", op.Key); err != nil {
			return err
		}
		if _, dup := seen[op.Key]; dup {
			return &KeyError{Op: "commit", Key: op.Key, Err: fmt.Errorf("%w: key appears twice", ErrInvalidCommit)}
		}
		seen[op.Key] = struct{}{}
		switch op.Kind {
		case OpCheck:
		case OpPut:
			if err := l.CheckValue("commit", op.Key, op.Value); err != nil {
				return err
			}
		case OpDelete:
			if op.Expected == 0 {
				return &KeyError{Op: "commit", Key: op.Key, Err: fmt.Errorf("%w: delete expects version 0", ErrInvalidVersion)}
			}
		default:
			return &KeyError{Op: "commit", Key: op.Key, Err: fmt.Errorf("%w: unknown operation kind %d", ErrInvalidCommit, op.Kind)}
		}
		total += len(op.Key) + len(op.Value)
	}
	if l.MaxCommitBytes > 0 && total > l.MaxCommitBytes {
		return fmt.Errorf("cas: commit: %w: %d bytes, limit %d", ErrTooLarge, total, l.MaxCommitBytes)
	}
	return nil
}
