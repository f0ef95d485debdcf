package dynamocas_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/dynamotest"
)

// newStore returns a store on a fresh table of its own, deleted when the
// test ends.
func newStore(t testing.TB, cli *dynamodb.Client, cfg dynamocas.Config) *dynamocas.Store {
	t.Helper()
	cfg.Table = dynamotest.TableName("occkit")
	s, err := dynamocas.New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	dynamotest.DeleteTable(t, cli, cfg.Table)
	return s
}

// otherWriter returns a store on s's table through a client of its own on
// srv: a writer the faults injected into s's client do not reach.
func otherWriter(t testing.TB, srv dynamotest.Server, s *dynamocas.Store) *dynamocas.Store {
	t.Helper()
	other, err := dynamocas.New(dynamotest.Client(t, srv), dynamocas.Config{Table: s.Table()})
	if err != nil {
		t.Fatal(err)
	}
	return other
}

// withoutCommit hides the Store's Commit from castest: dynalite has no
// TransactWriteItems, so on dynalite the suite must see a store that is a
// cas.FencedStore but not a cas.Committer, and skip the commit tests
// visibly ("does not support multi-key commits") instead of failing them.
type withoutCommit struct{ fencedExclusive }

// fencedExclusive is the Store's method set less Commit.
type fencedExclusive interface {
	cas.FencedStore
	cas.Exclusive
	cas.BatchGetter
	cas.Adder
	Table() string
}

// sameTable returns the harness's Reopen and ShortHold: another Store
// over s's table (as another process would open it), with cfg's attribute
// names and, for ShortHold, a 200 ms exclusive hold.
func sameTable(cli *dynamodb.Client, cfg dynamocas.Config, withCommit bool) (func(*testing.T, cas.Store) cas.Store, func(*testing.T, cas.Store) (cas.Store, time.Duration)) {
	open := func(t *testing.T, s cas.Store, ttl time.Duration) cas.Store {
		c := cfg
		c.Table, c.ExclusiveTTL = s.(fencedExclusive).Table(), ttl
		o, err := dynamocas.New(cli, c)
		if err != nil {
			t.Fatal(err)
		}
		if !withCommit {
			return withoutCommit{o}
		}
		return o
	}
	return castest.SameKeys(200*time.Millisecond, open)
}

// TestConformance runs cas/castest against both servers.
func TestConformance(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		{
			cli := dynamotest.Client(t, srv)
			probe, err := dynamocas.New(cli, dynamocas.Config{Table: "probe"})
			if err != nil {
				t.Fatal(err)
			}
			reopen, shortHold := sameTable(cli, dynamocas.Config{}, srv.Transactions)
			castest.Run(t, castest.Harness{
				NewStore: func(t *testing.T) cas.Store {
					s := newStore(t, cli, dynamocas.Config{})
					if !srv.Transactions {
						return withoutCommit{s}
					}
					return s
				},
				Reopen:    reopen,
				ShortHold: shortHold,
				// Both servers: minidyn returns the item with a refusal
				// (ALL_OLD); on dynalite, which does not, the store reads
				// it consistently.
				ReturnsCurrent: true,
				Limits:         probe.Limits(),
				Workers:        8,
				OpsPerWorker:   40,
			})
		}
	})
}

func TestNewConfig(t *testing.T) {
	cli, closeIdle := dynamotest.NewClient("http://127.0.0.1:1")
	defer closeIdle()
	tests := []struct {
		name string
		cfg  dynamocas.Config
		want string // "" for success
	}{
		{"Defaults", dynamocas.Config{Table: "t"}, ""},
		{"NoTable", dynamocas.Config{}, "Config.Table is required"},
		{"DuplicateNames", dynamocas.Config{Table: "t", ValueAttribute: "pk"}, "used twice"},
		{"KeyTooLong", dynamocas.Config{Table: "t", Limits: cas.Limits{MaxKeyBytes: 4096}}, "MaxKeyBytes"},
		{"ValueTooLarge", dynamocas.Config{Table: "t", Limits: cas.Limits{MaxValueBytes: dynamocas.MaxItemBytes}}, "MaxValueBytes"},
		{"TooManyOps", dynamocas.Config{Table: "t", Limits: cas.Limits{MaxCommitOps: dynamocas.MaxTransactItems + 1}}, "MaxCommitOps"},
		{"NegativeTimeout", dynamocas.Config{Table: "t", ResolveTimeout: -time.Second}, "ResolveTimeout"},
		{"LongName", dynamocas.Config{Table: "t", FenceAttribute: strings.Repeat("f", 256)}, "limit 255"},
		{"DuplicateHold", dynamocas.Config{Table: "t", HoldAttribute: "fence"}, "used twice"},
		{"TinyExclusiveTTL", dynamocas.Config{Table: "t", ExclusiveTTL: time.Microsecond}, "ExclusiveTTL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := dynamocas.New(cli, tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				l := s.Limits()
				if l.MaxKeyBytes != 1024 || l.MaxCommitOps != 100 || l.MaxValueBytes <= 400_000 || l.MaxValueBytes >= 400*1024-1024 {
					t.Fatalf("limits = %+v", l)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := dynamocas.New(nil, dynamocas.Config{Table: "t"}); err == nil {
		t.Fatal("New(nil client) succeeded")
	}
}

// hostileNames are attribute names that are DynamoDB reserved words or
// that would break an expression written with them literally.
var hostileNames = dynamocas.Config{
	KeyAttribute:       "key",
	VersionAttribute:   "size",
	ValueAttribute:     "name",
	FenceAttribute:     "#f :t) OR (1 = 1",
	WriteIDAttribute:   "a.b[0]",
	HoldAttribute:      ":h",
	HoldUntilAttribute: "until)",
}

// TestConformanceHostileNames runs the whole suite on a table whose
// attribute names are reserved words and expression syntax: every name
// goes through ExpressionAttributeNames.
func TestConformanceHostileNames(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli := dynamotest.Client(t, srv)
		probe, err := dynamocas.New(cli, dynamocas.Config{Table: "probe", KeyAttribute: hostileNames.KeyAttribute,
			VersionAttribute: hostileNames.VersionAttribute, ValueAttribute: hostileNames.ValueAttribute,
			FenceAttribute: hostileNames.FenceAttribute, WriteIDAttribute: hostileNames.WriteIDAttribute,
			HoldAttribute: hostileNames.HoldAttribute, HoldUntilAttribute: hostileNames.HoldUntilAttribute})
		if err != nil {
			t.Fatal(err)
		}
		castest.Run(t, castest.Harness{
			NewStore: func(t *testing.T) cas.Store {
				s := newStore(t, cli, hostileNames)
				if !srv.Transactions {
					return withoutCommit{s}
				}
				return s
			},
			ReturnsCurrent: true,
			Limits:         probe.Limits(),
			Workers:        4,
			OpsPerWorker:   20,
		})
	})
}

// hostileKeys look like expression syntax, placeholders and injection.
var hostileKeys = []string{
	"#k", ":e", "attribute_not_exists(pk) OR pk = :e", "' OR 1=1 --", `"quoted"`, `back\slash`,
	"a.b[0]", "SET value = :d", " leading and trailing ", "日本語/キー", "\t\n\r", "🙂",
}

func TestHostileKeys(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		s := newStore(t, dynamotest.Client(t, srv), hostileNames)
		ctx := dynamotest.Ctx(t, time.Minute)
		for _, k := range hostileKeys {
			v1, err := s.CompareAndSwap(ctx, k, 0, []byte(k))
			if err != nil {
				t.Fatalf("create %q: %v", k, err)
			}
			if _, err := s.CompareAndSwap(ctx, k, 0, []byte("again")); !errors.Is(err, cas.ErrConflict) {
				t.Fatalf("second create of %q: %v, want a conflict", k, err)
			}
			it, err := s.Get(ctx, k)
			if err != nil || it.Key != k || string(it.Value) != k || it.Version != v1 {
				t.Fatalf("get %q = %+v, %v", k, it, err)
			}
			if err := s.CompareAndDelete(ctx, k, v1); err != nil {
				t.Fatalf("delete %q: %v", k, err)
			}
		}
	})
}

// TestConflictRoundTrips checks what a conflict costs: on minidyn the
// refused UpdateItem returns the item (ALL_OLD), so no read follows; on
// dynalite, which ignores ReturnValuesOnConditionCheckFailure, one
// consistent GetItem does. Both conflicts carry the current item.
func TestConflictRoundTrips(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli, count := dynamotest.CountingClient(t, srv)
		s := newStore(t, cli, dynamocas.Config{})
		ctx := dynamotest.Ctx(t, time.Minute)
		v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
		if err != nil {
			t.Fatal(err)
		}
		v2, err := s.CompareAndSwap(ctx, "k", v1, []byte("two"))
		if err != nil {
			t.Fatal(err)
		}
		count.Reset()
		_, err = s.CompareAndSwap(ctx, "k", v1, []byte("stale"))
		var ce *cas.ConflictError
		if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != v2 || string(ce.Current.Value) != "two" {
			t.Fatalf("stale write: %v", err)
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			t.Fatalf("the native ConditionalCheckFailedException is not reachable with errors.As: %v", err)
		}
		wantReads := 0
		if !srv.ReturnsOldOnConditionFailure {
			wantReads = 1
		}
		if count.Get("UpdateItem") != 1 || count.Get("GetItem") != wantReads {
			t.Fatalf("conflict cost %d UpdateItem and %d GetItem, want 1 and %d", count.Get("UpdateItem"), count.Get("GetItem"), wantReads)
		}
	})
}

// TestTombstones checks the layout a delete leaves: the item stays with a
// NULL value, its version and its fence, so the next create gets a higher
// version and a stale fencing token stays stale.
func TestTombstones(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli := dynamotest.Client(t, srv)
		s := newStore(t, cli, dynamocas.Config{})
		ctx := dynamotest.Ctx(t, time.Minute)
		v1, err := s.CompareAndSwapFenced(ctx, "k", 0, 7, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CompareAndDelete(ctx, "k", v1); err != nil {
			t.Fatal(err)
		}
		out, err := cli.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table()), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := out.Item["value"].(*types.AttributeValueMemberNULL); !ok {
			t.Fatalf("tombstone value = %#v, want NULL", out.Item["value"])
		}
		if n, ok := out.Item["version"].(*types.AttributeValueMemberN); !ok || n.Value != fmt.Sprint(-int(v1)) {
			t.Fatalf("tombstone version = %#v, want -%d", out.Item["version"], v1)
		}
		if n, ok := out.Item["fence"].(*types.AttributeValueMemberN); !ok || n.Value != "7" {
			t.Fatalf("tombstone fence = %#v, want 7", out.Item["fence"])
		}
		v2, err := s.CompareAndSwap(ctx, "k", 0, []byte("y"))
		if err != nil || v2 != v1+1 {
			t.Fatalf("re-create = v%d, %v; want v%d", v2, err, v1+1)
		}
	})
}

// TestCommitOnDynalite checks that a commit on a server without
// TransactWriteItems fails clearly and definitely: not a conflict, not
// ambiguous, nothing written.
func TestCommitOnDynalite(t *testing.T) {
	srv := dynamotest.Dynalite(t)
	s := newStore(t, dynamotest.Client(t, srv), dynamocas.Config{})
	ctx := dynamotest.Ctx(t, time.Minute)
	_, err := s.Commit(ctx, []cas.Op{cas.Put("a", 0, []byte("A")), cas.Put("b", 0, []byte("B"))})
	if err == nil || errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrAmbiguous) || dynamocas.Retryable(err) {
		t.Fatalf("commit on dynalite: %v, want a definite, non-retryable error", err)
	}
	t.Logf("dynalite refuses TransactWriteItems: %v", err)
	if _, err := s.Get(ctx, "a"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get a after the refused commit: %v", err)
	}
}

// TestCommitConflictDetails checks the mapping of a cancelled transaction
// on minidyn: the first refused key in op order, its current item, and
// the native TransactionCanceledException reachable with errors.As.
func TestCommitConflictDetails(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	s := newStore(t, dynamotest.Client(t, srv), dynamocas.Config{})
	ctx := dynamotest.Ctx(t, time.Minute)
	a, _ := s.CompareAndSwap(ctx, "a", 0, []byte("A"))
	b, _ := s.CompareAndSwap(ctx, "b", 0, []byte("B"))
	b2, _ := s.CompareAndSwap(ctx, "b", b, []byte("B2"))
	_, err := s.Commit(ctx, []cas.Op{cas.Check("a", a), cas.Put("b", b, []byte("lost")), cas.Delete("c", 4)})
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || ce.Key != "b" || ce.Expected != b || !ce.HasCurrent || ce.Current.Version != b2 || string(ce.Current.Value) != "B2" {
		t.Fatalf("commit: %v, want a conflict on b carrying v%d", err, b2)
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		t.Fatalf("TransactionCanceledException not reachable: %v", err)
	}
	if dynamocas.Retryable(err) {
		t.Fatal("a conflict classified as Retryable (occ retries conflicts by itself)")
	}
}

// TestLargestItem writes the largest item the limits allow (longest key,
// largest value, the largest fencing token) through every kind of write,
// on dynalite, which enforces DynamoDB's 400 KB item limit like DynamoDB:
// the limits the store derives must fit.
func TestLargestItem(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		for _, cfg := range []dynamocas.Config{{}, hostileNames} {
			s := newStore(t, dynamotest.Client(t, srv), cfg)
			l := s.Limits()
			ctx := dynamotest.Ctx(t, time.Minute)
			key := strings.Repeat("k", l.MaxKeyBytes)
			val := make([]byte, l.MaxValueBytes)
			v1, err := s.CompareAndSwapFenced(ctx, key, 0, ^uint64(0), val)
			if err != nil {
				t.Fatalf("fenced create of a %d-byte key and %d-byte value: %v", len(key), len(val), err)
			}
			v2, err := s.CompareAndSwap(ctx, key, v1, val)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CompareAndDelete(ctx, key, v2); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CompareAndSwapFenced(ctx, key, 0, ^uint64(0), val); err != nil {
				t.Fatal(err)
			}
		}
	})
}
