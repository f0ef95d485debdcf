package rediscas

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
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
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	keys := []string{s.dataKey(key)}
	ttl := strconv.FormatInt(s.exclusiveTTL.Milliseconds(), 10)
	cur := cas.Item{Key: key}
	wait := 200 * time.Microsecond
	for {
		// Taking a hold twice with one token is harmless: it may be sent
		// again.
		res, err := runOnce(ctx, s.cli, holdScript, keys, token, ttl)
		if err != nil {
			return 0, &readError{key: key, err: err}
		}
		r, err := parseReply(res)
		if err != nil {
			return 0, err
		}
		if r.status == "ok" {
			if len(r.fields) >= 2 {
				v, err := parseVersion(r.field(0))
				if err != nil {
					return 0, err
				}
				cur.Version, cur.Value = cas.Version(v), []byte(r.field(1))
			}
			break
		}
		if r.status != "held" {
			return 0, fmt.Errorf("rediscas: unexpected script reply %q", r.status)
		}
		left, _ := strconv.ParseInt(r.field(0), 10, 64)
		if ctxwait.Sleep(ctx, min(wait, time.Duration(left+1)*time.Millisecond)) != nil {
			return 0, ctx.Err()
		}
		wait = min(2*wait, 10*time.Millisecond)
	}
	release := func() {
		// Best effort: the hold expires anyway.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
		defer cancel()
		_, _ = runOnce(rctx, s.cli, unholdScript, keys, token)
	}
	next, write, err := ctxwait.Guard(release, func() ([]byte, bool, error) { return fn(cur) })
	if err != nil || !write {
		release()
		return cur.Version, err
	}
	if err := s.limits.Put(ctx, key, next); err != nil {
		release()
		return 0, err
	}
	v, err := s.put(ctx, key, cur.Version, "", 0, next, token)
	if err != nil {
		release()
	}
	return v, err
}
