package rediscas

import (
	"context"
	"errors"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
)

// pending is a write whose answer may have been lost.
type pending struct {
	op       string // "compare-and-swap", "compare-and-delete", "commit"
	key      string // the key whose hash records the write id (a commit's marker)
	expected cas.Version
	del      bool // the write id is recorded as the key's last delete, not put
	id       writeid.ID
	// send sends the write again (same write id); answer interprets a
	// script reply as the caller's result.
	send   func(context.Context) (any, error)
	answer func(reply) (cas.Version, error)
}

// interpret turns a script's answer res into the caller's result. When
// the write waited for replicas and too few acknowledged (rerr is a
// *ReplicationError), an applied write is ambiguous: a failover could
// still lose it. A refusal stays a refusal: it wrote nothing.
func (w pending) interpret(res any, rerr error) (cas.Version, error) {
	r, err := parseReply(res)
	if err != nil {
		return 0, err
	}
	ver, err := w.answer(r)
	if err == nil && rerr != nil {
		return 0, &cas.AmbiguousError{Op: w.op, Key: w.key, WriteID: w.id.String(), Err: rerr}
	}
	return ver, err
}

// failedWrite turns the error of a write into the error the caller gets.
// A definite failure is wrapped as it is. An ambiguous one (the request
// may have reached Redis and its answer was lost) is resolved, within
// ResolveTimeout:
//
//  1. While the caller's context is live, the write is sent again with the
//     same write id. The scripts recognise their own write id and the
//     version check keeps a write from applying twice, so this is safe: an
//     "ok" means the write applied once (now, or the first time and it is
//     still the key's last write). Once the caller's context has ended the
//     write is not sent again (the caller gave up).
//  2. Otherwise the key's hash is read. Its history (the key's last
//     Config.History writes, each with the version it replaced) decides:
//     this write's id there means success, with the version it made; the
//     version this write expected named as replaced by another write means
//     it never applied (a version is replaced once), and the caller gets the
//     conflict (or the stale token) the server answered or would have.
//  3. Anything else — the version expected was replaced longer ago than
//     the history reaches, the write was a create (version 0 is not one
//     state), the key is unchanged while the first request may still be in
//     flight, or Redis did not answer in time — is a *cas.AmbiguousError
//     with the write id.
func (s *Store) failedWrite(ctx context.Context, w pending, err error) (cas.Version, error) {
	_ = s.noticeFailure(ctx, err)
	if !mayHaveApplied(err) {
		return 0, &cas.KeyError{Op: w.op, Key: w.key, Err: wrapErr(err)}
	}
	amb := &cas.AmbiguousError{Op: w.op, Key: w.key, WriteID: w.id.String(), Err: err}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	var refused error // the answer to the write sent again, if it was refused
	if ctx.Err() == nil {
		wait := 10 * time.Millisecond
		for {
			res, rerr := w.send(rctx)
			if rerr == nil || replication(rerr) != nil {
				if _, perr := parseReply(res); perr != nil {
					return 0, amb
				}
				ver, aerr := w.interpret(res, rerr)
				if aerr == nil || errors.Is(aerr, cas.ErrAmbiguous) {
					return ver, aerr
				}
				refused = aerr
				break
			}
			if !mayHaveApplied(rerr) && !Retryable(rerr) {
				return 0, amb
			}
			if ctxwait.Sleep(rctx, wait) != nil {
				return 0, amb
			}
			wait = min(2*wait, 500*time.Millisecond)
		}
	}
	st, ok := s.probe(rctx, w.key)
	if !ok {
		return 0, amb
	}
	switch ver, out := st.decide(w); out {
	case applied:
		if s.waitReplicas > 0 {
			// Read from whichever server served the key: nothing says
			// its replicas have the write.
			return 0, amb
		}
		return ver, nil
	case notApplied:
		if refused != nil {
			return 0, refused
		}
		ce := &cas.ConflictError{Key: w.key, Expected: w.expected, Current: cas.Item{Key: w.key}, HasCurrent: true, Err: err}
		if st.live {
			ce.Current.Version, ce.Current.Value = st.n, []byte(st.v)
		}
		return 0, ce
	}
	return 0, amb
}

// hashState is what probe read of a key's hash.
type hashState struct {
	live    bool
	v       string
	n       cas.Version
	history []entry
}

type outcome uint8

const (
	unknown outcome = iota
	applied
	notApplied
)

// decide tells, from the key's history, whether the write w applied, and
// if it did, the version it made (0 for a delete).
func (st hashState) decide(w pending) (cas.Version, outcome) {
	for i, e := range st.history {
		if e.id != w.id {
			continue
		}
		switch {
		case w.del:
			return 0, applied
		case i == 0:
			return st.n, applied // w is the key's last write
		default:
			return cas.Version(st.history[i-1].replaced), applied // the next write replaced w's version
		}
	}
	if w.expected == 0 {
		// "Absent" is not one version: a create may have applied in an
		// earlier life of the key, beyond the history.
		return 0, unknown
	}
	for _, e := range st.history {
		if e.replaced == uint64(w.expected) {
			return 0, notApplied // another write replaced the version w expected
		}
	}
	return 0, unknown
}

// probe reads key's hash until it answers or ctx ends.
func (s *Store) probe(ctx context.Context, key string) (hashState, bool) {
	wait := 10 * time.Millisecond
	for {
		vals, err := s.cli.HMGet(ctx, s.dataKey(key), "v", "n", "h").Result()
		if err == nil && len(vals) == 3 {
			var st hashState
			st.v, st.live = vals[0].(string)
			if n, ok := vals[1].(string); ok {
				v, _ := parseVersion(n)
				st.n = cas.Version(v)
			}
			h, _ := vals[2].(string)
			st.history = parseHistory(h)
			return st, true
		}
		if ctxwait.Sleep(ctx, wait) != nil {
			return hashState{}, false
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}
