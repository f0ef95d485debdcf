package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
)

// Defaults for Config's zero fields.
const (
	DefaultKeyAttribute     = "pk"
	DefaultVersionAttribute = "version"
	DefaultValueAttribute   = "value"
	DefaultFenceAttribute   = "fence"
	DefaultWriteIDAttribute = "writeid"
	DefaultHoldAttribute    = "hold"
	DefaultHoldUntilAttr    = "hold_until"
	DefaultResolveTimeout   = 5 * time.Second
	// DefaultExclusiveTTL is Config.ExclusiveTTL's default.
	DefaultExclusiveTTL = 2 * time.Second
)

// DynamoDB's limits, from which the store derives its cas.Limits.
const (
	// MaxItemBytes is DynamoDB's largest item: 400 KB, attribute names
	// and values included.
	MaxItemBytes = 400 * 1024
	// MaxPartitionKeyBytes is DynamoDB's longest partition key value.
	MaxPartitionKeyBytes = 2048
	// MaxSortKeyBytes is DynamoDB's longest sort key value.
	MaxSortKeyBytes = 1024
	// MaxTransactItems is the most actions one TransactWriteItems may carry.
	MaxTransactItems = 100
	// MaxTransactBytes is the largest aggregate size of the items of one
	// TransactWriteItems: 4 MB.
	MaxTransactBytes = 4 * 1024 * 1024
	// MaxAttributeNameBytes is the longest attribute name Config accepts.
	MaxAttributeNameBytes = 255

	numberBytes = 21 // the most a number attribute's value may count for
	slackBytes  = 64 // margin for the server's own rounding
)

// Config configures a Store. Table is required; every other zero field
// means its default.
type Config struct {
	// Table is the DynamoDB table (its name or ARN). Required.
	Table string
	// KeyAttribute is the table's partition key, a string attribute
	// (default "pk").
	KeyAttribute string
	// VersionAttribute holds the key's version, a number (default
	// "version").
	VersionAttribute string
	// ValueAttribute holds the value, a binary attribute present only
	// while the key exists (default "value").
	ValueAttribute string
	// FenceAttribute holds the largest fencing token that wrote the key
	// (default "fence").
	FenceAttribute string
	// WriteIDAttribute holds the 16-byte id of the last write (default
	// "writeid").
	WriteIDAttribute string
	// Limits are the key, value and commit limits. Zero fields mean
	// the defaults: keys up to cas.DefaultMaxKeyBytes (1024), and values
	// and commits as large as DynamoDB takes (400 KB items less the other
	// attributes, 100 operations and 4 MB per transaction; see Limits).
	// DynamoDB's maximums (keys up to MaxPartitionKeyBytes, the rest as
	// for the defaults) cannot be exceeded: New refuses larger limits.
	Limits cas.Limits
	// ResolveTimeout bounds the time spent finding out whether a write
	// whose answer was lost was applied (default 5 s).
	ResolveTimeout time.Duration
	// HoldAttribute and HoldUntilAttribute hold an exclusive update's
	// hold on the key (see UpdateExclusive): its 16-byte token, and when
	// it ends in Unix milliseconds (defaults "hold" and "hold_until").
	HoldAttribute, HoldUntilAttribute string
	// ExclusiveTTL bounds an exclusive update's hold (default 2 s): a
	// holder that stops answering loses the key after it.
	ExclusiveTTL time.Duration
}

type attrNames struct {
	key, version, value, fence, writeID, hold, holdUntil string
}

// Store is a cas.Store on a DynamoDB table. It implements cas.FencedStore,
// cas.Committer and cas.Exclusive. It is safe for concurrent use.
type Store struct {
	cli     *dynamodb.Client
	table   string
	names   attrNames
	limits  cas.Limits
	resolve time.Duration
	ttl     time.Duration
	ids     *writeid.Source
}

var (
	_ cas.Store       = (*Store)(nil)
	_ cas.FencedStore = (*Store)(nil)
	_ cas.Committer   = (*Store)(nil)
	_ cas.Exclusive   = (*Store)(nil)
	_ cas.BatchGetter = (*Store)(nil)
	_ cas.Adder       = (*Store)(nil)
)

// New returns a Store on cfg.Table, reached through cli. It does not talk
// to the server; see CreateTable.
func New(cli *dynamodb.Client, cfg Config) (*Store, error) {
	if cli == nil {
		return nil, errors.New("dynamocas: nil client")
	}
	if cfg.Table == "" {
		return nil, errors.New("dynamocas: Config.Table is required")
	}
	def := func(p *string, d string) {
		if *p == "" {
			*p = d
		}
	}
	def(&cfg.KeyAttribute, DefaultKeyAttribute)
	def(&cfg.VersionAttribute, DefaultVersionAttribute)
	def(&cfg.ValueAttribute, DefaultValueAttribute)
	def(&cfg.FenceAttribute, DefaultFenceAttribute)
	def(&cfg.WriteIDAttribute, DefaultWriteIDAttribute)
	def(&cfg.HoldAttribute, DefaultHoldAttribute)
	def(&cfg.HoldUntilAttribute, DefaultHoldUntilAttr)
	if cfg.ExclusiveTTL == 0 {
		cfg.ExclusiveTTL = DefaultExclusiveTTL
	}
	if cfg.ExclusiveTTL < time.Millisecond {
		return nil, fmt.Errorf("dynamocas: ExclusiveTTL %v is below a millisecond", cfg.ExclusiveTTL)
	}
	if cfg.ResolveTimeout == 0 {
		cfg.ResolveTimeout = DefaultResolveTimeout
	}
	if cfg.ResolveTimeout < 0 {
		return nil, fmt.Errorf("dynamocas: negative ResolveTimeout %v", cfg.ResolveTimeout)
	}
	names := attrNames{cfg.KeyAttribute, cfg.VersionAttribute, cfg.ValueAttribute, cfg.FenceAttribute, cfg.WriteIDAttribute, cfg.HoldAttribute, cfg.HoldUntilAttribute}
	seen := map[string]bool{}
	for _, n := range []string{names.key, names.version, names.value, names.fence, names.writeID, names.hold, names.holdUntil} {
		if len(n) > MaxAttributeNameBytes {
			return nil, fmt.Errorf("dynamocas: attribute name %.20q... is %d bytes, limit %d", n, len(n), MaxAttributeNameBytes)
		}
		if seen[n] {
			return nil, fmt.Errorf("dynamocas: attribute name %q is used twice", n)
		}
		seen[n] = true
	}
	// An item holds the key, the version, the value, the fence, the
	// write id and a hold, names included: the value gets what is left
	// of 400 KB.
	overhead := len(names.key) + len(names.version) + numberBytes + len(names.value) +
		len(names.fence) + numberBytes + len(names.writeID) + writeid.Len +
		len(names.hold) + holdTokenLen + len(names.holdUntil) + numberBytes + slackBytes
	keyBytes := cfg.Limits.MaxKeyBytes
	if keyBytes == 0 {
		keyBytes = cas.DefaultMaxKeyBytes
	}
	// DynamoDB's maximums, for the attribute names chosen: the value gets
	// what a 400 KB item leaves beside the longest key.
	hard := cas.Limits{
		MaxKeyBytes:    MaxPartitionKeyBytes,
		MaxValueBytes:  MaxItemBytes - overhead - keyBytes,
		MaxCommitOps:   MaxTransactItems,
		MaxCommitBytes: MaxTransactBytes - MaxTransactItems*overhead,
	}
	if err := cfg.Limits.Within(hard); err != nil {
		return nil, fmt.Errorf("dynamocas: %w", err)
	}
	defaults := hard
	defaults.MaxKeyBytes = cas.DefaultMaxKeyBytes
	return &Store{
		cli:     cli,
		table:   cfg.Table,
		names:   names,
		limits:  cfg.Limits.Or(defaults),
		resolve: cfg.ResolveTimeout,
		ttl:     cfg.ExclusiveTTL,
		ids:     writeid.NewSource(),
	}, nil
}

// Limits returns the limits the store enforces.
func (s *Store) Limits() cas.Limits { return s.limits }

// Table returns the table's name.
func (s *Store) Table() string { return s.table }

// String returns "dynamocas(<table>)".
func (s *Store) String() string { return "dynamocas(" + s.table + ")" }

func (s *Store) keyAV(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.names.key: str(key)}
}

// updateInput is the UpdateItem of key with upd under cond (their names
// and values declared in e) that returns the item it found when cond
// fails.
func (s *Store) updateInput(key, upd, cond string, e *expr) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.keyAV(key),
		UpdateExpression:                    aws.String(upd),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            e.names,
		ExpressionAttributeValues:           e.valueMap(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// getInput is the strongly consistent GetItem of key's whole item.
func (s *Store) getInput(key string) *dynamodb.GetItemInput {
	return &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: s.keyAV(key), ConsistentRead: aws.Bool(true)}
}

// Get implements cas.Store with a strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return cas.Item{}, err
	}
	e := s.newExpr()
	proj := e.name(s, phVersion) + ", " + e.name(s, phValue)
	out, err := s.cli.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(s.table),
		Key:                      s.keyAV(key),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String(proj),
		ExpressionAttributeNames: e.names,
	})
	if err != nil {
		return cas.Item{}, &readError{key: key, err: err}
	}
	st, err := s.decode(key, out.Item)
	if err != nil {
		return cas.Item{}, err
	}
	if st.item.Version == 0 {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	}
	return st.item, nil
}

// GetMany implements cas.BatchGetter with BatchGetItem, strongly
// consistent: one round trip for up to 100 keys (the keys the server
// leaves unprocessed, under throttling, are asked for again).
func (s *Store) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	if err := s.limits.GetMany(ctx, keys); err != nil {
		return nil, err
	}
	out := make([]cas.Item, len(keys))
	at := make(map[string]int, len(keys))
	for i, k := range keys {
		out[i] = cas.Item{Key: k}
		at[k] = i
	}
	e := s.newExpr()
	proj := e.name(s, phKey) + ", " + e.name(s, phVersion) + ", " + e.name(s, phValue)
	for start := 0; start < len(keys); start += maxBatchGet {
		batch := keys[start:min(start+maxBatchGet, len(keys))]
		req := make([]map[string]types.AttributeValue, len(batch))
		for i, k := range batch {
			req[i] = s.keyAV(k)
		}
		pending := map[string]types.KeysAndAttributes{s.table: {
			Keys: req, ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String(proj), ExpressionAttributeNames: e.names,
		}}
		wait := 20 * time.Millisecond
		for len(pending) > 0 {
			resp, err := s.cli.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: pending})
			if err != nil {
				return nil, &readError{key: batch[0], err: err}
			}
			for _, av := range resp.Responses[s.table] {
				ks, ok := av[s.names.key].(*types.AttributeValueMemberS)
				if !ok {
					continue
				}
				i, ok := at[ks.Value]
				if !ok {
					continue
				}
				st, err := s.decode(ks.Value, av)
				if err != nil {
					return nil, err
				}
				out[i] = st.item
			}
			pending = resp.UnprocessedKeys
			if len(pending) > 0 {
				if err := ctxwait.Sleep(ctx, wait); err != nil {
					return nil, &readError{key: batch[0], err: err}
				}
				wait = min(2*wait, time.Second)
			}
		}
	}
	return out, nil
}

// maxBatchGet is the most keys one BatchGetItem may ask for.
const maxBatchGet = 100

// readState reads key's whole item consistently, retrying transient
// failures until ctx ends.
func (s *Store) readState(ctx context.Context, key string) (state, error) {
	wait := 20 * time.Millisecond
	for {
		out, err := s.cli.GetItem(ctx, s.getInput(key))
		if err == nil {
			return s.decode(key, out.Item)
		}
		if ctx.Err() != nil || !Retryable(&readError{key: key, err: err}) {
			return state{}, err
		}
		if serr := ctxwait.Sleep(ctx, wait); serr != nil {
			return state{}, err
		}
		wait = min(2*wait, time.Second)
	}
}

// write is one conditional single-key write, kept whole so that it can be
// sent again, identically, while resolving a lost answer.
type write struct {
	op       string
	key      string
	expected cas.Version
	delete   bool
	fenced   bool
	token    uint64
	id       writeid.ID
	in       *dynamodb.UpdateItemInput
	// unheld: the write's condition also asks that no exclusive update
	// holds the key (at :now, refreshed before each send); held: the
	// write is an exclusive update's, conditional on its hold.
	unheld, held bool
}

// holds reports whether st satisfies the write's condition.
func (w *write) holds(st state) bool {
	if w.fenced && st.fence > w.token {
		return false
	}
	return st.item.Version == w.expected
}

// noSDKRetry makes the SDK send a conditional write once: its retryer
// would resend a write whose answer was lost, and a resend refused by its
// condition cannot tell "my first attempt applied" from "someone else
// wrote". The store resolves lost answers itself (resolveWrite), and
// occ retries throttling through Retryable.
func noSDKRetry(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

// CompareAndSwap implements cas.Store with one conditional UpdateItem:
//
//	SET value = :d, version = :e + 1, writeid = :w  IF version = :e
//
// (a create: IF attribute_not_exists(version) OR version < 0, the new
// version one above the one a tombstone kept). A conflict carries the current item: DynamoDB returns
// it with ReturnValuesOnConditionCheckFailure ALL_OLD, and a consistent
// GetItem stands in for servers that do not. While an exclusive update
// holds the key (UpdateExclusive), the write waits for it to end.
func (s *Store) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	return s.sendUnheld(ctx, s.putWrite(key, expected, value, false, 0, nil))
}

// CompareAndSwapFenced implements cas.FencedStore: the fencing token is
// checked in the same condition expression as the version,
//
//	IF (attribute_not_exists(fence) OR fence <= :t) AND <version condition>
//
// and recorded by the same update. A refused write whose token is stale
// fails with *cas.FencedError, checked before the version. The fence
// attribute is never removed: it survives plain writes and deletes.
func (s *Store) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	return s.send(ctx, s.putWrite(key, expected, value, true, token, nil))
}

// CompareAndDelete implements cas.Store. A delete leaves a tombstone: the
// value attribute becomes NULL, the version attribute the deleted
// version negated, the fence attribute stays; so the key's next version is
// above every version it had and its fencing token still holds. Like
// CompareAndSwap, it waits while an exclusive update holds the key.
func (s *Store) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := s.limits.Delete(ctx, key, expected); err != nil {
		return err
	}
	id := s.ids.Next()
	e := s.newExpr()
	upd := s.deleteUpdate(e, id, uint64(expected))
	cond := s.unheldCond(e) + " AND " + s.versionCond(e, uint64(expected))
	w := &write{op: "compare-and-delete", key: key, expected: expected, delete: true, id: id, unheld: true, in: s.updateInput(key, upd, cond, e)}
	_, err := s.sendUnheld(ctx, w)
	return err
}

func (s *Store) definiteError(op, key string, err error) error {
	if tooLarge(err) {
		return &cas.KeyError{Op: op, Key: key, Err: fmt.Errorf("%w: %w", cas.ErrTooLarge, err)}
	}
	return &cas.KeyError{Op: op, Key: key, Err: fmt.Errorf("dynamocas: %w", err)}
}
