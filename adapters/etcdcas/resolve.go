package etcdcas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// failedWrite turns the error of a write to key (expected version
// expected, write id id; a zero id for deletes) into the error the caller
// gets. A definite failure is wrapped as it is. An ambiguous one (the
// request may have been applied) is resolved by reading the key and its
// history back:
//
//   - the key, or its history after expected, holds this write's id: the
//     write applied, and the caller gets its version;
//   - the version expected has been replaced by other writes and this
//     write's id is nowhere: the write can never apply (its compare names a
//     version that is gone), and the caller gets a conflict;
//   - otherwise (the key is unchanged, or history was compacted, or the
//     cluster did not answer within ResolveTimeout): *cas.AmbiguousError.
func (s *Store) failedWrite(ctx context.Context, op, key string, expected cas.Version, id writeid.ID, err error) (cas.Version, error) {
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrTooManyOps) {
		return 0, &cas.KeyError{Op: op, Key: key, Err: fmt.Errorf("%w: %w", cas.ErrTooLarge, err)}
	}
	if !ambiguous(ctx, err) {
		return 0, &cas.KeyError{Op: op, Key: key, Err: fmt.Errorf("etcdcas: %w", err)}
	}
	amb := &cas.AmbiguousError{Op: op, Key: key, Err: err}
	if id != (writeid.ID{}) {
		amb.WriteID = id.String()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	ver, applied, known := s.resolveKey(rctx, s.dataKey(key), expected, id)
	switch {
	case !known:
		return 0, amb
	case applied:
		return ver, nil
	}
	cur, gerr := s.get(rctx, key) // linearizable: the conflict's current state
	ce := &cas.ConflictError{Key: key, Expected: expected, Err: err}
	switch {
	case gerr == nil:
		ce.Current, ce.HasCurrent = cur, true
	case errors.Is(gerr, cas.ErrNotFound):
		ce.Current, ce.HasCurrent = cas.Item{Key: key}, true
	}
	return 0, ce
}

// resolveCommit resolves a commit whose answer was lost through its first
// put (a commit writes all its puts at one revision with one write id).
func (s *Store) resolveCommit(ctx context.Context, ops []cas.Op, firstPut int, id writeid.ID, err error) (int64, error) {
	key := ops[0].Key
	if firstPut >= 0 {
		key = ops[firstPut].Key
	}
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrTooManyOps) {
		return 0, &cas.KeyError{Op: "commit", Key: key, Err: fmt.Errorf("%w: %w", cas.ErrTooLarge, err)}
	}
	if !ambiguous(ctx, err) {
		return 0, &cas.KeyError{Op: "commit", Key: key, Err: fmt.Errorf("etcdcas: %w", err)}
	}
	amb := &cas.AmbiguousError{Op: "commit", Key: key, Err: err}
	if firstPut < 0 {
		return 0, amb // nothing carries a write id
	}
	amb.WriteID = id.String()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	ver, applied, known := s.resolveKey(rctx, s.dataKey(key), ops[firstPut].Expected, id)
	switch {
	case !known:
		return 0, amb
	case applied:
		return int64(ver), nil
	}
	return 0, &cas.ConflictError{Key: key, Expected: ops[firstPut].Expected, Err: err}
}

// resolveKey finds out whether the write with id (a put; the zero id: a
// delete) expecting version expected was applied to the data key dk.
// known is false when it cannot tell.
func (s *Store) resolveKey(ctx context.Context, dk string, expected cas.Version, id writeid.ID) (ver cas.Version, applied, known bool) {
	resp, err := s.readBack(ctx, dk)
	if err != nil {
		return 0, false, false
	}
	var cur *mvccpb.KeyValue
	if len(resp.Kvs) > 0 {
		cur = resp.Kvs[0]
	}
	isPut := id != (writeid.ID{})
	if isPut && cur != nil {
		if got, _, err := decodeEnvelope(cur.Value); err == nil && got == id {
			return cas.Version(cur.ModRevision), true, true
		}
	}
	curVer := int64(0)
	if cur != nil {
		curVer = cur.ModRevision
	}
	if curVer == int64(expected) {
		return 0, false, false // unchanged: the write may still be in flight
	}
	// The key moved on from expected. Walk its history after expected: the
	// first change after expected is the only one this write can be.
	from := int64(expected) + 1
	if expected == 0 {
		// A create may have applied in any earlier lifetime of the key;
		// search its whole retained history.
		from = 1
	}
	ev, err := s.firstChange(ctx, dk, from, resp.Header.Revision, func(ev *clientv3.Event) bool {
		if !isPut {
			return true // the first change after expected decides a delete
		}
		if ev.Type != clientv3.EventTypePut {
			return false
		}
		got, _, err := decodeEnvelope(ev.Kv.Value)
		return err == nil && got == id
	})
	switch {
	case err != nil:
		return 0, false, false
	case ev == nil && expected == 0 && cur == nil:
		return 0, false, false // absent again: a late create could still apply
	case ev == nil:
		return 0, false, true
	case isPut:
		return cas.Version(ev.Kv.ModRevision), true, true
	case ev.Type == clientv3.EventTypeDelete:
		// The version expected was deleted. A competing delete of the same
		// version would have had the same effect; either way the state the
		// caller asked for holds and nothing was applied twice.
		return 0, true, true
	default:
		return 0, false, true
	}
}

// readBack reads dk linearizably, retrying while the cluster recovers
// (a new leader is being elected) until ctx ends.
func (s *Store) readBack(ctx context.Context, dk string) (*clientv3.GetResponse, error) {
	wait := 50 * time.Millisecond
	for {
		resp, err := s.cli.Get(ctx, dk)
		if err == nil {
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// firstChange returns the first event on dk with revision in [from, upto]
// for which match is true, or nil if there is none. It fails when the
// history was compacted or ctx ends.
func (s *Store) firstChange(ctx context.Context, dk string, from, upto int64, match func(*clientv3.Event) bool) (*clientv3.Event, error) {
	if from > upto {
		return nil, nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.cli.Watch(wctx, dk, clientv3.WithRev(from), clientv3.WithProgressNotify())
	if err := s.cli.RequestProgress(wctx); err != nil {
		return nil, err
	}
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return nil, err
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision > upto {
				return nil, nil
			}
			if match(ev) {
				return ev, nil
			}
		}
		if wr.IsProgressNotify() && wr.Header.Revision >= upto {
			return nil, nil
		}
		if len(wr.Events) == 0 && !wr.IsProgressNotify() {
			continue
		}
		if wr.Header.Revision >= upto && len(wr.Events) > 0 && wr.Events[len(wr.Events)-1].Kv.ModRevision >= upto {
			return nil, nil
		}
		// Ask again: a progress notification tells when all events up to
		// the current revision were delivered.
		if err := s.cli.RequestProgress(wctx); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("etcdcas: watch closed")
}
