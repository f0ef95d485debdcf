package occ_test

import (
	"context"
	"errors"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// TestNilContext: a nil context is a caller's mistake; Retry, Update and
// Txn refuse it with cas.ErrNilContext and never call the function.
func TestNilContext(t *testing.T) {
	var nilCtx context.Context
	calls := 0
	if err := occ.Retry(nilCtx, func(context.Context) error { calls++; return nil }); !errors.Is(err, cas.ErrNilContext) {
		t.Errorf("Retry: %v, want cas.ErrNilContext", err)
	}
	store := memcas.New()
	counter := cas.NewTyped(store, cas.JSON[int]())
	if _, _, err := occ.Update(nilCtx, counter, "k", func(n int, _ bool) (int, error) { calls++; return n + 1, nil }); !errors.Is(err, cas.ErrNilContext) {
		t.Errorf("Update: %v, want cas.ErrNilContext", err)
	}
	if err := occ.Txn(nilCtx, store, func(*occ.Tx) error { calls++; return nil }); !errors.Is(err, cas.ErrNilContext) {
		t.Errorf("Txn: %v, want cas.ErrNilContext", err)
	}
	if calls != 0 {
		t.Errorf("the function ran %d times", calls)
	}
}
