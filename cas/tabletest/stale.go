package tabletest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/occ"
)

// Tables whose reads may be stale (Harness.StaleReads): the suite reads
// its writes back until they show, and mutate functions that check the
// state they are given send an older one back to be read again.

// staleReadWait bounds how long a read-back of a table with
// Harness.StaleReads polls for the state the test wrote.
const staleReadWait = 5 * time.Second

// wrong returns a read-back failure that no stale read explains.
func wrong(format string, args ...any) error { return castest.Unexplained(format, args...) }

// settle is castest.Settle with the harness's StaleReads.
func (h Harness[K]) settle(t *testing.T, check func() error) {
	t.Helper()
	castest.Settle(t, h.StaleReads, check)
}

// wantRow checks that the row with key id is want (when: the moment, for
// the message). With StaleReads, an older state (absent, or a lower
// version) is read again.
func (h Harness[K]) wantRow(ctx context.Context, t *testing.T, tbl Table[K], id string, want Row, when string) {
	t.Helper()
	h.settle(t, func() error {
		got, err := tbl.Get(ctx, h.Key(id))
		switch {
		case err == nil && got == want:
			return nil
		case errors.Is(err, cas.ErrNotFound):
			return fmt.Errorf("%s: Get(%s): %w; want %+v", when, id, err, want)
		case err != nil:
			return wrong("%s: Get(%s): %w; want %+v", when, id, err, want)
		case tbl.VersionOf(got) < tbl.VersionOf(want):
			return fmt.Errorf("%s: Get(%s) = %+v, want %+v", when, id, got, want)
		}
		return wrong("%s: Get(%s) = %+v, want %+v", when, id, got, want)
	})
}

// wantAbsent checks that the row with key id does not exist. With
// StaleReads, a row is read again (it may be one deleted since).
func (h Harness[K]) wantAbsent(ctx context.Context, t *testing.T, tbl Table[K], id string) {
	t.Helper()
	h.settle(t, func() error {
		got, err := tbl.Get(ctx, h.Key(id))
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return nil
		case err != nil:
			return wrong("Get(%s): %w; want cas.ErrNotFound", id, err)
		}
		return fmt.Errorf("Get(%s) = %+v; want cas.ErrNotFound", id, got)
	})
}

// errStale is what a mutate function returns, with StaleReads, for a
// state older than one the test knows the row to have (absent, or a lower
// version): retryStale makes occ read the row again instead of ending the
// call with it.
var errStale = errors.New("tabletest: mutate was given a state older than the row's (a stale read)")

// stale returns errStale when reads may be stale and older says the
// state mutate was given is older than the row's; otherwise the error
// of a state the test did not expect, made by fail.
func (h Harness[K]) stale(older bool, fail func() error) error {
	if h.StaleReads && older {
		return errStale
	}
	return fail()
}

// retryStale is the occ option that runs mutate again after errStale
// (none when reads are current), added to opts.
func (h Harness[K]) retryStale(opts ...occ.Option) []occ.Option {
	if !h.StaleReads {
		return opts
	}
	// A replica may lag for seconds (another package's test pausing its
	// replay): enough attempts to wait that out at the default backoff's
	// 20 ms, unless the caller set its own limit (its option comes later
	// and wins).
	out := append([]occ.Option{occ.WithMaxAttempts(500)}, opts...)
	return append(out, occ.WithRetryable(func(err error) bool { return errors.Is(err, errStale) }))
}
