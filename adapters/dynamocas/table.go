package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
	"github.com/occkit/occkit/occ"
)

// TableConfig describes an application's own table for Table.
type TableConfig struct {
	// Table is the table's name (or ARN). Required.
	Table string
	// PartitionKey is the name of the table's partition key attribute.
	// Required.
	PartitionKey string
	// SortKey is the name of the table's sort key attribute, if it has
	// one.
	SortKey string
	// VersionAttribute is the number attribute that holds an item's
	// version (default "version"). T must have a field for it (tagged
	// `dynamodbav:"version"`, an integer, without omitempty): reads fill
	// it in, Update takes the expected version from it, and every write
	// returns the item with its new version there.
	VersionAttribute string
	// HoldAttribute and HoldUntilAttribute hold the exclusive hold that
	// Modify escalates to for a call that keeps losing to other
	// processes: a token, and when the hold ends in Unix milliseconds
	// (defaults "hold" and "hold_until"). T should not map fields to
	// them. Items carry them only while held, or after a hold that wrote
	// nothing (then hold_until is 0).
	HoldAttribute, HoldUntilAttribute string
	// ExclusiveTTL bounds a hold (default DefaultExclusiveTTL): a holder
	// that stops answering loses the item after it.
	ExclusiveTTL time.Duration
	// EncoderOptions and DecoderOptions, if set, adjust how items are
	// marshalled and unmarshalled by package attributevalue (for example
	// to use `json` tags).
	EncoderOptions func(*attributevalue.EncoderOptions)
	DecoderOptions func(*attributevalue.DecoderOptions)
}

// Key is the primary key of an item of a Table: the partition key value
// and, when the table has a sort key, the sort key value. Values are Go
// values marshalled by package attributevalue (a string, a number, a
// []byte). A key DynamoDB would refuse or take for another key fails with
// cas.ErrInvalidKey before anything is sent, in a Key as in an item's key
// attributes: a missing part, a Sort value on a table without a sort key,
// an empty string or binary value, a string that is not valid UTF-8, and
// a value over MaxPartitionKeyBytes (a partition key) or MaxSortKeyBytes
// (a sort key).
type Key struct {
	Partition any
	Sort      any
}

// Table is a versioned view of an application's own table whose items map
// to T through package attributevalue: the Go equivalent of the Java
// enhanced client's VersionedRecordExtension, with the method set that
// pgcas and sqlcas tables share (docs/tables.md). Every write is
// conditional on the version attribute in the same request: Insert
// creates an item only if it is absent; Update replaces it only if its
// version is still the one in the item's version field; Delete deletes
// only at the expected version; Modify is an optimistic read-modify-write
// run by occ.Update's loop; and versioned writes go inside transactions
// too (see Tx), which the Java mapper refuses.
//
// The version lives in the item: T's field for the version attribute.
// A key's versions strictly increase over its whole history, also across
// Delete and a later Insert (no ABA): Delete does not remove the item but
// leaves a tombstone, the key attributes and the version attribute
// holding the deleted version negated (as Store does), which every read
// of the Table reports as absent and which a later Insert replaces at the
// version above it. Tombstones cost one small item per deleted key and
// are never removed; other readers of the table see them (filter them
// with "version > 0").
//
// A Table is safe for concurrent use.
type Table[T any] struct {
	cli     *dynamodb.Client
	cfg     TableConfig
	encOpts []func(*attributevalue.EncoderOptions)
	decOpts []func(*attributevalue.DecoderOptions)
	rows    *rowupdate.Rows[T] // Modify's bridge onto occ (turns, combiner, cache)
}

// NewTable returns a Table over cfg's table. It does not talk to the
// server.
func NewTable[T any](cli *dynamodb.Client, cfg TableConfig) (*Table[T], error) {
	if cli == nil {
		return nil, errors.New("dynamocas: NewTable: nil client")
	}
	if cfg.Table == "" || cfg.PartitionKey == "" {
		return nil, errors.New("dynamocas: NewTable: TableConfig.Table and PartitionKey are required")
	}
	if cfg.VersionAttribute == "" {
		cfg.VersionAttribute = DefaultVersionAttribute
	}
	if cfg.HoldAttribute == "" {
		cfg.HoldAttribute = DefaultHoldAttribute
	}
	if cfg.HoldUntilAttribute == "" {
		cfg.HoldUntilAttribute = DefaultHoldUntilAttr
	}
	if cfg.ExclusiveTTL == 0 {
		cfg.ExclusiveTTL = DefaultExclusiveTTL
	}
	if cfg.ExclusiveTTL < time.Millisecond {
		return nil, fmt.Errorf("dynamocas: NewTable: ExclusiveTTL %v is below a millisecond", cfg.ExclusiveTTL)
	}
	names := []string{cfg.PartitionKey, cfg.VersionAttribute, cfg.HoldAttribute, cfg.HoldUntilAttribute}
	if cfg.SortKey != "" {
		names = append(names, cfg.SortKey)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return nil, fmt.Errorf("dynamocas: NewTable: the key, version and hold attributes must differ: %q is used twice", n)
		}
		seen[n] = true
	}
	var zero T
	if rt := reflect.TypeOf(zero); rt == nil || rt.Kind() != reflect.Struct {
		return nil, fmt.Errorf("dynamocas: NewTable: T is %v, want a struct", rt)
	}
	t := &Table[T]{cli: cli, cfg: cfg}
	if cfg.EncoderOptions != nil {
		t.encOpts = append(t.encOpts, cfg.EncoderOptions)
	}
	if cfg.DecoderOptions != nil {
		t.decOpts = append(t.decOpts, cfg.DecoderOptions)
	}
	// The version field: a zero T marshals it as the number 0.
	av, err := attributevalue.MarshalMapWithOptions(zero, t.encOpts...)
	if err != nil {
		return nil, fmt.Errorf("dynamocas: NewTable[%T]: %w", zero, err)
	}
	if n, ok := av[cfg.VersionAttribute].(*types.AttributeValueMemberN); !ok || n.Value != "0" {
		return nil, fmt.Errorf("dynamocas: NewTable[%T]: no integer field for the version attribute %q (tag it `dynamodbav:\"%s\"`, without omitempty)", zero, cfg.VersionAttribute, cfg.VersionAttribute)
	}
	t.rows = t.newRows()
	return t, nil
}

// Name returns the table's name.
func (t *Table[T]) Name() string { return t.cfg.Table }

// decodeItem unmarshals a stored live item into T (the version field
// filled in from the version attribute).
func (t *Table[T]) decodeItem(ks string, av map[string]types.AttributeValue) (T, error) {
	var v T
	if err := attributevalue.UnmarshalMapWithOptions(av, &v, t.decOpts...); err != nil {
		return v, &cas.CodecError{Key: ks, Decode: true, Err: err}
	}
	return v, nil
}

// Get returns the item with key, decoded, its version field filled in,
// with a strongly consistent read. A missing item (or the tombstone of a
// deleted one) fails with an error matching cas.ErrNotFound.
func (t *Table[T]) Get(ctx context.Context, key Key) (T, error) {
	v, _, err := t.get(ctx, key)
	return v, err
}

// get is Get that also returns the version.
func (t *Table[T]) get(ctx context.Context, key Key) (T, cas.Version, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, 0, err
	}
	kav, err := t.keyAV("get", key)
	if err != nil {
		return zero, 0, err
	}
	av, err := t.read(ctx, kav)
	if err != nil {
		return zero, 0, &readError{key: keyString(key), err: err}
	}
	return t.decodeStored(keyString(key), av)
}

// decodeStored decodes an item as read (nil when absent): a live item
// into T and its version; an absent item or a tombstone is an error
// matching cas.ErrNotFound.
func (t *Table[T]) decodeStored(ks string, av map[string]types.AttributeValue) (T, cas.Version, error) {
	var zero T
	raw, err := signedAttr(av, t.cfg.VersionAttribute)
	if err != nil {
		return zero, 0, &cas.CodecError{Key: ks, Decode: true, Err: err}
	}
	if raw <= 0 {
		return zero, 0, &cas.KeyError{Op: "get", Key: ks, Err: cas.ErrNotFound}
	}
	v, err := t.decodeItem(ks, av)
	if err != nil {
		return zero, 0, err
	}
	return v, cas.Version(raw), nil
}

func (t *Table[T]) read(ctx context.Context, kav map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := t.cli.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.cfg.Table), Key: kav, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// Insert writes item as a new item, at version 1 for a key that never
// existed, or one above the version a deleted item of the key had (one
// more round trip, after the tombstone refused the first). Its version
// field is ignored. It returns the item as stored, its version field set.
// An item that exists is a *cas.ConflictError (Expected 0) with
// HasCurrent and the current version, and the returned T is the current
// item.
func (t *Table[T]) Insert(ctx context.Context, item T) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	w, err := t.prepInsert("insert", item)
	if err != nil {
		return zero, err
	}
	return t.write(ctx, w)
}

// Update is the version-checked write of an item the caller holds: it
// replaces the stored item only if its version is still item's version
// field, at that version + 1, and returns the item as stored. A refusal
// is a *cas.ConflictError carrying the current version (HasCurrent), and
// the returned T is then the current item; an item deleted meanwhile is
// the same conflict with Current.Version 0, which also matches
// cas.ErrNotFound.
func (t *Table[T]) Update(ctx context.Context, item T) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	w, err := t.prepUpdate("update", item)
	if err != nil {
		return zero, err
	}
	return t.write(ctx, w)
}

// Delete deletes the item with key if its version is expected (not 0).
// The item is replaced by a tombstone (its key attributes and the version
// attribute, negated) that reads as absent and keeps the version, so that
// a later Insert of the key gets a version above it. A stale version is a
// *cas.ConflictError with the current version.
func (t *Table[T]) Delete(ctx context.Context, key Key, expected cas.Version) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := t.prepDelete(key, expected)
	if err != nil {
		return err
	}
	_, err = t.sendUnheld(ctx, w)
	return err
}

// Modify is the optimistic read-modify-write of the item with key, run by
// occ.Update's loop (see docs/tables.md): it reads the item (exists false
// and cur the zero T with only its key fields set when there is none),
// calls mutate, and writes the result as Update does (as Insert does when
// the item was absent), retrying on a conflict: at once from the current
// item the conflict carried (on servers that return it), then after a
// backoff wait from a fresh read. mutate must keep the item's key; it
// runs on the caller's goroutine and may run more than once, so it must
// not have side effects; an error from it is returned as is and nothing
// is written. Modify returns the item its own mutate returned, with the
// version the write gave it. Calls of one process take turns at a hot
// item, share one write with occ.WithCombiner and skip the read with a
// cache from NewCache; mutate must not modify what cur refers to (maps,
// slices) in place: a cache or a combined write hands one item to several
// calls. See docs/tables.md.
//
// Pass occ.WithRetryable(dynamocas.Retryable) to retry throttling too.
func (t *Table[T]) Modify(ctx context.Context, key Key, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, error) {
	k, err := t.rowKey("modify", key)
	if err != nil {
		return k.Absent, err
	}
	return t.rows.Modify(ctx, k, mutate, opts...)
}

// ModifyMany is Modify over several items at once, as one optimistic
// transaction: it reads the items with keys (cur[i] is the absent item
// with only its key set, exists[i] false, for a key with none), calls
// mutate, and writes every item mutate returned (each must keep its key)
// in one TransactWriteItems, conditional on the versions read, creating
// the absent ones; when one changed meanwhile it runs mutate again from
// the items as they are, as occ.Txn does (calls of one process take
// turns at hot items; opts are occ's). It returns the items as stored,
// with their new versions. The keys must be distinct, at most
// MaxTransactItems of them. A call that keeps losing to other processes
// runs its next attempt holding the items (their exclusive holds, taken
// in key order; see Modify). It needs a server with transactions
// (DynamoDB, minidyn; not dynalite).
func (t *Table[T]) ModifyMany(ctx context.Context, keys []Key, mutate func(cur []T, exists []bool) ([]T, error), opts ...occ.Option) ([]T, error) {
	ks := make([]rowupdate.Key[T], len(keys))
	for i, key := range keys {
		k, err := t.rowKey("modify-many", key)
		if err != nil {
			return nil, err
		}
		ks[i] = k
	}
	return t.rows.ModifyMany(ctx, ks, mutate, opts...)
}

// rowKey builds the bridge's Key of an item: its text, the item with only
// its key set, and a check that a mutated item keeps the key.
func (t *Table[T]) rowKey(op string, key Key) (rowupdate.Key[T], error) {
	var absent T
	kav, err := t.keyAV(op, key)
	if err != nil {
		return rowupdate.Key[T]{Absent: absent}, err
	}
	if err := attributevalue.UnmarshalMapWithOptions(kav, &absent, t.decOpts...); err != nil {
		return rowupdate.Key[T]{Absent: absent}, &cas.KeyError{Op: op, Key: keyString(key), Err: fmt.Errorf("%w: %w", cas.ErrInvalidKey, err)}
	}
	ks := keyString(key)
	return rowupdate.Key[T]{
		Text:   keyText(key),
		Value:  key,
		Absent: absent,
		Check: func(next *T) error {
			av, err := attributevalue.MarshalMapWithOptions(*next, t.encOpts...)
			if err != nil {
				return &cas.CodecError{Key: ks, Err: err}
			}
			got, gks, err := t.keyOf(op, av)
			if err != nil || !reflect.DeepEqual(got, kav) {
				return occ.Permanent(&cas.KeyError{Op: op, Key: ks, Err: fmt.Errorf("%w: mutate changed the item's key to %q", cas.ErrInvalidKey, gks)})
			}
			return nil
		},
	}, nil
}

// NewCache returns a version cache of at most maxEntries items of t, for
// occ.WithCache: a Modify of an item whose version this process already
// knows skips the read and costs one conditional write.
func (t *Table[T]) NewCache(maxEntries int) *occ.Cache { return t.rows.NewCache(maxEntries) }

// newRows returns t's bridge onto occ: the reads and conditional writes
// of Modify.
func (t *Table[T]) newRows() *rowupdate.Rows[T] {
	return rowupdate.New(rowupdate.Driver[T]{
		Read: func(ctx context.Context, key any) (rowupdate.Row[T], error) {
			v, ver, err := t.get(ctx, key.(Key))
			return rowupdate.Row[T]{Value: v, Version: ver}, err
		},
		Write: func(ctx context.Context, _ any, expected cas.Version, next T) (rowupdate.Row[T], rowupdate.Row[T], error) {
			var (
				w   *tableWrite
				err error
			)
			if expected == 0 {
				w, err = t.prepInsert("modify", next)
			} else if err = t.setVersion(&next, expected); err == nil {
				w, err = t.prepUpdate("modify", next)
			}
			if err != nil {
				return rowupdate.Row[T]{}, rowupdate.Row[T]{}, err
			}
			out, err := t.write(ctx, w)
			if err != nil {
				var cur rowupdate.Row[T]
				var ce *cas.ConflictError
				if errors.As(err, &ce) && ce.HasCurrent {
					cur = rowupdate.Row[T]{Value: out, Version: ce.Current.Version}
				}
				return rowupdate.Row[T]{}, cur, err
			}
			return rowupdate.Row[T]{Value: out, Version: w.version}, rowupdate.Row[T]{}, nil
		},
		SetVersion:      t.setVersion,
		Exclusive:       t.exclusive,
		Commit:          t.commitMany,
		CommitExclusive: t.commitExclusive,
	})
}

// setVersion sets the version field of *item to v, through the item's
// attributes (the field is the one the version attribute maps to).
func (t *Table[T]) setVersion(item *T, v cas.Version) error {
	av, err := attributevalue.MarshalMapWithOptions(*item, t.encOpts...)
	if err != nil {
		return &cas.CodecError{Err: err}
	}
	av[t.cfg.VersionAttribute] = num(uint64(v))
	var out T
	if err := attributevalue.UnmarshalMapWithOptions(av, &out, t.decOpts...); err != nil {
		return &cas.CodecError{Err: err}
	}
	*item = out
	return nil
}

// VersionOf returns the version in item's version field (0 for an item
// never written, or one whose version field does not encode a version).
func (t *Table[T]) VersionOf(item T) cas.Version {
	av, err := attributevalue.MarshalMapWithOptions(item, t.encOpts...)
	if err != nil {
		return 0
	}
	n, err := signedAttr(av, t.cfg.VersionAttribute)
	if err != nil || n < 0 {
		return 0
	}
	return cas.Version(n)
}
