package rediscas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/holds"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultExclusiveTTL is Config.ExclusiveTTL's default.
const DefaultExclusiveTTL = 2 * time.Second

var _ cas.Exclusive = (*Store)(nil)

// errHeld is the cause of a write refused while an exclusive update
// holds the key.
var errHeld = errors.New("rediscas: the key is held by an exclusive update")

// heldConflict is the conflict of a write refused because an exclusive
// update holds the key; it carries the key's state.
func heldConflict(key string, expected cas.Version, cur []string) error {
	err := conflict(key, expected, cur)
	var ce *cas.ConflictError
	if errors.As(err, &ce) {
		if ce.Current.Version == 0 {
			ce.Current.Value = nil
		}
		ce.Err = errHeld
	}
	return err
}

// writeUnheld is write for a writer other than an exclusive update: while
// an exclusive update holds the key, it waits (polling) and sends the
// write again, as a writer waits for a row lock, so that a hold costs the
// others one lost write each and not a burst of refused ones. The write
// id makes sending it again safe. ctx bounds the wait.
func (s *Store) writeUnheld(ctx context.Context, w pending) (cas.Version, error) {
	return ctxwait.WhileHeld(ctx, errHeld, func() (cas.Version, error) { return s.write(ctx, w) })
}

// UpdateExclusive implements cas.Exclusive with a hold kept in the key's
// hash: a script takes it (waiting, by polling, while another update
// holds the key) and returns the key's state, fn runs, and the write,
// which carries the hold's token, ends it. Meanwhile CompareAndSwap and
// CompareAndDelete of the key wait for the hold to end (then usually find
// their version gone: a conflict), and a Commit that touches the key is
// refused with a *cas.ConflictError. A hold lasts Config.ExclusiveTTL by the server's
// clock: a holder that stops answering loses the key then, and its late
// write is refused (its version is gone, or the key is held by another).
func (s *Store) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	token := writeid.Random()
	cur, err := s.takeHold(ctx, key, token)
	if err != nil {
		return 0, err
	}
	release := func() { s.releaseHolds(ctx, token, key) }
	next, write, err := holds.Next(ctx, s.limits, key, cur, fn, release)
	if !write {
		return cur.Version, err
	}
	v, err := s.put(ctx, key, cur.Version, "", 0, next, token)
	if err != nil {
		release()
	}
	return v, err
}

// releaseHolds ends token's holds of keys, best effort: they expire
// anyway.
func (s *Store) releaseHolds(ctx context.Context, token string, keys ...string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	for _, k := range keys {
		_, _ = runOnce(rctx, s.cli, unholdScript, []string{s.dataKey(k)}, token)
	}
}

// takeHold takes key's hold with token, waiting (polling) while another
// update holds it, and returns the key's state. Taking a hold twice with
// one token is harmless: it may be sent again.
func (s *Store) takeHold(ctx context.Context, key, token string) (cas.Item, error) {
	keys := []string{s.dataKey(key)}
	ttl := strconv.FormatInt(s.exclusiveTTL.Milliseconds(), 10)
	cur := cas.Item{Key: key}
	var poll ctxwait.Poll
	for {
		res, err := runOnce(ctx, s.cli, holdScript, keys, token, ttl)
		if err != nil {
			return cur, &readError{key: key, err: s.noticeFailure(ctx, err)}
		}
		r, err := parseReply(res)
		if err != nil {
			return cur, err
		}
		if r.status == "ok" {
			if len(r.fields) >= 2 {
				v, err := parseVersion(r.field(0))
				if err != nil {
					return cur, err
				}
				cur.Version, cur.Value = cas.Version(v), []byte(r.field(1))
			}
			return cur, nil
		}
		if r.status != "held" {
			return cur, fmt.Errorf("rediscas: unexpected script reply %q", r.status)
		}
		if poll.Wait(ctx) != nil {
			return cur, ctx.Err()
		}
	}
}

var _ cas.ExclusiveCommitter = (*Store)(nil)

// CommitExclusive implements cas.ExclusiveCommitter with the holds of
// UpdateExclusive: it takes the hold of every key in key order (so that
// two callers cannot wait for each other), reads them as it does, calls
// fn, and commits fn's ops with Commit's script carrying the holds'
// token, which its own holds let through and which ends them. The holds
// of keys fn did not write end right after. Meanwhile other writes of
// the keys wait (CompareAndSwap, CompareAndDelete) or are refused
// (Commit). A holder that stops answering loses the keys after
// Config.ExclusiveTTL by the server's clock.
func (s *Store) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	const op = "exclusive commit"
	if err := s.limits.CommitExclusive(ctx, keys); err != nil {
		return nil, err
	}
	if err := s.checkSlots(op, keys); err != nil {
		return nil, err
	}
	token := writeid.Random()
	return holds.Commit(keys,
		func(k string) (cas.Item, error) { return s.takeHold(ctx, k, token) },
		fn,
		func(ops []cas.Op, _ map[string]cas.Item) ([]cas.Version, error) { return s.commit(ctx, ops, token) },
		func(left []string) { s.releaseHolds(ctx, token, left...) })
}
