package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
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
	// version (default "version"). T may have a field for it (tagged
	// `dynamodbav:"version"`): reads fill it in, writes overwrite it.
	VersionAttribute string
	// EncoderOptions and DecoderOptions, if set, adjust how items are
	// marshalled and unmarshalled by package attributevalue (for example
	// to use `json` tags).
	EncoderOptions func(*attributevalue.EncoderOptions)
	DecoderOptions func(*attributevalue.DecoderOptions)
}

// Key is the primary key of an item of a Table: the partition key value
// and, when the table has a sort key, the sort key value. Values are Go
// values marshalled by package attributevalue (a string, a number, a
// []byte).
type Key struct {
	Partition any
	Sort      any
}

// Table is a versioned view of an application's own table whose items map
// to T through package attributevalue: the Go equivalent of the Java
// enhanced client's VersionedRecordExtension. Every write is conditional
// on the version attribute in the same request: Put creates an item only
// if it is absent (version 1) or replaces it only if its version is still
// the expected one (version + 1); Delete deletes only at the expected
// version; Update is an optimistic read-modify-write that occ retries on a
// conflict; and versioned writes go inside transactions too (see Tx),
// which the Java mapper refuses.
//
// Versions are per item and start at 1 again when an item is deleted and
// created anew (as with VersionedRecordExtension): do not hold a version
// across a delete, or key items by ids that are never reused. (Store,
// which owns its table, keeps tombstones and never reuses a version.)
//
// A Table is safe for concurrent use.
type Table[T any] struct {
	cli     *dynamodb.Client
	cfg     TableConfig
	encOpts []func(*attributevalue.EncoderOptions)
	decOpts []func(*attributevalue.DecoderOptions)
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
	if cfg.VersionAttribute == cfg.PartitionKey || cfg.VersionAttribute == cfg.SortKey || cfg.PartitionKey == cfg.SortKey {
		return nil, fmt.Errorf("dynamocas: NewTable: key and version attributes must differ: %+v", cfg)
	}
	var zero T
	if rt := reflect.TypeOf(zero); rt == nil || (rt.Kind() != reflect.Struct && !(rt.Kind() == reflect.Pointer && rt.Elem().Kind() == reflect.Struct)) {
		return nil, fmt.Errorf("dynamocas: NewTable: T is %v, want a struct", rt)
	}
	t := &Table[T]{cli: cli, cfg: cfg}
	if cfg.EncoderOptions != nil {
		t.encOpts = append(t.encOpts, cfg.EncoderOptions)
	}
	if cfg.DecoderOptions != nil {
		t.decOpts = append(t.decOpts, cfg.DecoderOptions)
	}
	return t, nil
}

// Name returns the table's name.
func (t *Table[T]) Name() string { return t.cfg.Table }

// keyAV marshals key into the table's key attributes.
func (t *Table[T]) keyAV(op string, key Key) (map[string]types.AttributeValue, error) {
	pk, err := attributevalue.Marshal(key.Partition)
	if err != nil || key.Partition == nil {
		return nil, &cas.KeyError{Op: op, Key: keyString(key), Err: fmt.Errorf("%w: partition key: %v", cas.ErrInvalidKey, err)}
	}
	m := map[string]types.AttributeValue{t.cfg.PartitionKey: pk}
	if t.cfg.SortKey != "" {
		sk, err := attributevalue.Marshal(key.Sort)
		if err != nil || key.Sort == nil {
			return nil, &cas.KeyError{Op: op, Key: keyString(key), Err: fmt.Errorf("%w: sort key: %v", cas.ErrInvalidKey, err)}
		}
		m[t.cfg.SortKey] = sk
	}
	return m, nil
}

// keyString names a key in errors: the partition value, then "/" and the
// sort value if there is one.
func keyString(k Key) string {
	if k.Sort == nil {
		return fmt.Sprint(k.Partition)
	}
	return fmt.Sprintf("%v/%v", k.Partition, k.Sort)
}

// keyOf returns the key attributes of a marshalled item and its Key.
func (t *Table[T]) keyOf(op string, av map[string]types.AttributeValue) (map[string]types.AttributeValue, string, error) {
	m := map[string]types.AttributeValue{}
	var parts []string
	for _, name := range []string{t.cfg.PartitionKey, t.cfg.SortKey} {
		if name == "" {
			continue
		}
		v, ok := av[name]
		if !ok {
			return nil, "", &cas.KeyError{Op: op, Key: "?", Err: fmt.Errorf("%w: item has no key attribute %q", cas.ErrInvalidKey, name)}
		}
		m[name] = v
		parts = append(parts, avString(v))
	}
	ks := parts[0]
	if len(parts) == 2 {
		ks += "/" + parts[1]
	}
	return m, ks, nil
}

func avString(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberB:
		return fmt.Sprintf("%x", v.Value)
	}
	return fmt.Sprintf("%T", v)
}

// decode unmarshals a stored item into T and returns its version.
func (t *Table[T]) decode(ks string, av map[string]types.AttributeValue) (T, cas.Version, error) {
	var v T
	ver, err := numberAttr(av, t.cfg.VersionAttribute)
	if err != nil {
		return v, 0, &cas.CodecError{Key: ks, Decode: true, Err: err}
	}
	if err := attributevalue.UnmarshalMapWithOptions(av, &v, t.decOpts...); err != nil {
		return v, 0, &cas.CodecError{Key: ks, Decode: true, Err: err}
	}
	return v, ver, nil
}

// Get returns the item with key, decoded, and its version, with a
// strongly consistent read. A missing item fails with an error matching
// cas.ErrNotFound.
func (t *Table[T]) Get(ctx context.Context, key Key) (T, cas.Version, error) {
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
	if av == nil {
		return zero, 0, &cas.KeyError{Op: "get", Key: keyString(key), Err: cas.ErrNotFound}
	}
	return t.decode(keyString(key), av)
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

// tableWrite is a prepared conditional write of one item.
type tableWrite struct {
	op       string
	ks       string
	kav      map[string]types.AttributeValue
	expected cas.Version
	version  cas.Version // the version it writes (0 for a delete)
	item     map[string]types.AttributeValue
	cond     string
	names    map[string]string
	values   map[string]types.AttributeValue
}

// prepPut marshals item for a write at expected, setting its version.
func (t *Table[T]) prepPut(item T, expected cas.Version) (*tableWrite, error) {
	av, err := attributevalue.MarshalMapWithOptions(item, t.encOpts...)
	if err != nil {
		return nil, &cas.CodecError{Err: err}
	}
	kav, ks, err := t.keyOf("put", av)
	if err != nil {
		return nil, err
	}
	w := &tableWrite{op: "put", ks: ks, kav: kav, expected: expected, version: expected + 1, item: av}
	av[t.cfg.VersionAttribute] = num(uint64(w.version))
	if size := itemSize(av); size > MaxItemBytes {
		return nil, &cas.KeyError{Op: "put", Key: ks, Err: fmt.Errorf("%w: item is %d bytes, limit %d", cas.ErrTooLarge, size, MaxItemBytes)}
	}
	t.condition(w)
	return w, nil
}

func (t *Table[T]) prepDelete(op string, key Key, expected cas.Version) (*tableWrite, error) {
	kav, err := t.keyAV(op, key)
	if err != nil {
		return nil, err
	}
	if expected == 0 && op == "delete" {
		return nil, &cas.KeyError{Op: op, Key: keyString(key), Err: fmt.Errorf("%w: expected version 0 names an item that does not exist", cas.ErrInvalidVersion)}
	}
	w := &tableWrite{op: op, ks: keyString(key), kav: kav, expected: expected}
	t.condition(w)
	return w, nil
}

// condition sets w's condition: the item absent (expected 0) or at version
// expected. Names go through placeholders, so reserved words are fine.
func (t *Table[T]) condition(w *tableWrite) {
	if w.expected == 0 {
		w.cond = "attribute_not_exists(#pk)"
		w.names = map[string]string{"#pk": t.cfg.PartitionKey}
		return
	}
	w.cond = "#ver = :expected"
	w.names = map[string]string{"#ver": t.cfg.VersionAttribute}
	w.values = map[string]types.AttributeValue{":expected": num(uint64(w.expected))}
}

// Put writes item if the stored item is at version expected: 0 creates it
// only if absent (at version 1), any other version replaces it only if its
// version is still expected (at expected + 1). The key comes from item's
// key attributes. It returns the new version; a failed condition is a
// *cas.ConflictError whose Current.Version is the stored version (0:
// absent; Current.Value is nil: decode the item with Get, or let Update
// do it).
func (t *Table[T]) Put(ctx context.Context, item T, expected cas.Version) (cas.Version, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	w, err := t.prepPut(item, expected)
	if err != nil {
		return 0, err
	}
	_, err = t.send(ctx, w)
	if err != nil {
		return 0, err
	}
	return w.version, nil
}

// Delete deletes the item with key if its version is expected (not 0).
func (t *Table[T]) Delete(ctx context.Context, key Key, expected cas.Version) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := t.prepDelete("delete", key, expected)
	if err != nil {
		return err
	}
	_, err = t.send(ctx, w)
	return err
}

// Update is an optimistic read-modify-write of the item with key: it reads
// the item (exists false and the zero T when absent), calls mutate, and
// writes the result conditional on the version it read, retrying with
// occ.Retry (and opts) on a conflict. A conflict carries the stored item,
// so a retry does not read again (on servers that return it). mutate must
// keep the item's key; it runs on the caller's goroutine and may run more
// than once, so it must not have side effects; an error from it is
// returned as is and nothing is written. Update returns the item written
// and its version.
//
// Pass occ.WithRetryable(dynamocas.Retryable) to retry throttling too.
func (t *Table[T]) Update(ctx context.Context, key Key, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, cas.Version, error) {
	var (
		cur     T
		ver     cas.Version
		known   bool
		written T
		wver    cas.Version
	)
	kav, err := t.keyAV("update", key)
	if err != nil {
		return written, 0, err
	}
	err = occ.Retry(ctx, func(ctx context.Context) error {
		if !known {
			var err error
			cur, ver, err = t.Get(ctx, key)
			if err != nil && !errors.Is(err, cas.ErrNotFound) {
				return err
			}
		}
		known = false
		next, err := mutate(cur, ver != 0)
		if err != nil {
			return err
		}
		w, err := t.prepPut(next, ver)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(w.kav, kav) {
			return &cas.KeyError{Op: "update", Key: keyString(key), Err: fmt.Errorf("%w: mutate changed the item's key to %q", cas.ErrInvalidKey, w.ks)}
		}
		old, err := t.send(ctx, w)
		var ce *cas.ConflictError
		if errors.As(err, &ce) && old != nil {
			// Start the next attempt from the item the conflict returned.
			var zero T
			cur, ver, known = zero, 0, true
			if len(old) > 0 {
				if cur, ver, err = t.decode(w.ks, old); err != nil {
					return err
				}
			}
			return ce
		}
		if err != nil {
			return err
		}
		written, wver = next, w.version
		return nil
	}, opts...)
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return written, wver, nil
}

// send sends w once (PutItem, or DeleteItem when w has no item). On a
// failed condition it returns the stored item (empty when absent; nil when
// unknown) with the *cas.ConflictError.
func (t *Table[T]) send(ctx context.Context, w *tableWrite) (map[string]types.AttributeValue, error) {
	var err error
	if w.item != nil {
		_, err = t.cli.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           aws.String(t.cfg.Table),
			Item:                                w.item,
			ConditionExpression:                 aws.String(w.cond),
			ExpressionAttributeNames:            w.names,
			ExpressionAttributeValues:           w.values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, noSDKRetry)
	} else {
		_, err = t.cli.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName:                           aws.String(t.cfg.Table),
			Key:                                 w.kav,
			ConditionExpression:                 aws.String(w.cond),
			ExpressionAttributeNames:            w.names,
			ExpressionAttributeValues:           w.values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, noSDKRetry)
	}
	if err == nil {
		return nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return t.refused(ctx, w, ccf.Item, err)
	}
	if definite(err) {
		if tooLarge(err) {
			return nil, &cas.KeyError{Op: w.op, Key: w.ks, Err: fmt.Errorf("%w: %w", cas.ErrTooLarge, err)}
		}
		return nil, &cas.KeyError{Op: w.op, Key: w.ks, Err: fmt.Errorf("dynamocas: %w", err)}
	}
	return nil, t.lost(ctx, w, err)
}

// refused builds the conflict of w from the stored item the server
// returned, or from a consistent read when it returned none.
func (t *Table[T]) refused(ctx context.Context, w *tableWrite, old map[string]types.AttributeValue, cause error) (map[string]types.AttributeValue, error) {
	ce := &cas.ConflictError{Key: w.ks, Expected: w.expected, Current: cas.Item{Key: w.ks}, Err: cause}
	if len(old) == 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultResolveTimeout)
		var err error
		old, err = t.read(rctx, w.kav)
		cancel()
		if err != nil {
			return nil, ce
		}
	}
	var cur cas.Version
	if old != nil {
		var err error
		if cur, err = numberAttr(old, t.cfg.VersionAttribute); err != nil {
			return nil, ce
		}
	} else {
		old = map[string]types.AttributeValue{}
	}
	if cur == w.expected {
		return nil, ce // changed back since: not the state that refused w
	}
	ce.Current.Version, ce.HasCurrent = cur, true
	return old, ce
}

// lost handles a write whose answer was lost. Items of an application's
// table carry no write id, so the outcome can be settled only when the
// item is still at the version w expected: then w has not applied, and it
// is sent again (the same condition lets at most one of the two sends
// apply). Otherwise the caller gets a *cas.AmbiguousError.
func (t *Table[T]) lost(ctx context.Context, w *tableWrite, cause error) error {
	amb := &cas.AmbiguousError{Op: w.op, Key: w.ks, Err: cause}
	if ctx.Err() != nil {
		return amb
	}
	av, err := t.read(ctx, w.kav)
	if err != nil {
		return amb
	}
	var cur cas.Version
	if av != nil {
		if cur, err = numberAttr(av, t.cfg.VersionAttribute); err != nil {
			return amb
		}
	}
	if cur != w.expected {
		return amb
	}
	_, err = t.send(ctx, w)
	var ce *cas.ConflictError
	if errors.As(err, &ce) || errors.Is(err, cas.ErrAmbiguous) || (definite(err) && unread(err)) {
		// Refused by the condition (or, its answer cut, maybe so): by
		// the first send, which applied meanwhile, or by another writer.
		return amb
	}
	return err
}

// itemSize is an item's size as DynamoDB counts it against 400 KB:
// attribute names plus values, numbers at one byte per two digits plus
// one, documents with 3 bytes of overhead and 1 per element.
func itemSize(av map[string]types.AttributeValue) int {
	n := 0
	for name, v := range av {
		n += len(name) + avSize(v)
	}
	return n
}

func avSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value)/2 + 2
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += len(s)/2 + 2
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + avSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + avSize(e)
		}
		return n
	}
	return 0
}
