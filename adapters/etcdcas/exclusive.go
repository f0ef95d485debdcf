package etcdcas

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/holds"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultExclusiveTTL is Config.ExclusiveTTL's default.
const DefaultExclusiveTTL = 2 * time.Second

var _ cas.Exclusive = (*Store)(nil)

// holdKey is the key of key's exclusive hold.
func (s *Store) holdKey(key string) string { return s.hold + key }

// UpdateExclusive implements cas.Exclusive with a hold key beside the
// data key, attached to a lease of Config.ExclusiveTTL (whole seconds,
// at least etcd's minimum): one transaction creates it if it does not
// exist and reads the key (while another update holds the key, it waits,
// polling); fn runs; the write, If(ModRevision(key) == read,
// Value(hold) == this hold), puts the value and deletes the hold.
// Meanwhile CompareAndSwap, CompareAndDelete and Commit writing the key,
// which require the hold key to be absent, wait for the hold to end (then
// usually find their version gone: a conflict), as writers wait for a row
// lock. A holder that stops answering loses the key when its lease
// expires; its late write is refused. CompareAndSwapFenced does not look
// at holds, nor does a Commit of the most operations the limits allow
// (see Commit): one that overtakes a hold makes the holder's write
// conflict, which loses nothing. Holds share a lease per Store, granted again every
// half ExclusiveTTL, so that most exclusive updates cost two
// transactions: a hold lasts between half the TTL and the whole of it.
func (s *Store) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	const op = "exclusive update"
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	dk, hk := s.dataKey(key), s.holdKey(key)
	token := writeid.Random()
	held := false
	// release ends the hold, best effort (it expires with its lease).
	release := func() {
		if !held {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
		defer cancel()
		_, _ = s.cli.Txn(rctx).If(clientv3.Compare(clientv3.Value(hk), "=", token)).Then(clientv3.OpDelete(hk)).Commit()
	}
	cur := cas.Item{Key: key}
	var poll ctxwait.Poll
	for {
		lease, err := s.holdLease(ctx)
		if err != nil {
			return 0, &readError{key: key, err: err}
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(hk), "=", 0)).
			Then(clientv3.OpPut(hk, token, clientv3.WithLease(lease)), clientv3.OpGet(dk)).
			Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.dropLease(lease) // expired meanwhile: take another
			continue
		}
		if err != nil {
			held = true // the answer may have been lost: the hold may exist
			release()
			return 0, &readError{key: key, err: err}
		}
		if held = resp.Succeeded; held {
			if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
				if cur, _, err = s.item(key, kvs[0]); err != nil {
					release()
					return 0, err
				}
			}
			break
		}
		if err := poll.Wait(ctx); err != nil {
			return 0, err
		}
	}
	next, write, err := holds.Next(ctx, s.limits, key, cur, fn, release)
	if !write {
		return cur.Version, err
	}
	id := s.ids.Next()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(dk), "=", int64(cur.Version)), clientv3.Compare(clientv3.Value(hk), "=", token)).
		Then(clientv3.OpPut(dk, encodeEnvelope(id, next)), clientv3.OpDelete(hk)).
		Else(clientv3.OpGet(dk)).
		Commit()
	if err != nil {
		release()
		return s.failedWrite(ctx, op, key, cur.Version, id, err)
	}
	if !resp.Succeeded {
		release()
		return 0, s.conflict(key, cur.Version, (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()))
	}
	return cas.Version(resp.Header.Revision), nil
}

// holdLease returns the lease holds are taken with: the store's current
// one, or a new one when it is half its TTL old (a hold taken with it
// then lasts at least half the TTL).
func (s *Store) holdLease(ctx context.Context) (clientv3.LeaseID, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.lease != 0 && time.Since(s.leaseAt) < s.exclusiveTTL/2 {
		return s.lease, nil
	}
	l, err := s.cli.Grant(ctx, int64(math.Ceil(s.exclusiveTTL.Seconds())))
	if err != nil {
		return 0, err
	}
	s.lease, s.leaseAt = l.ID, time.Now()
	return s.lease, nil
}

// dropLease forgets lease, which the server no longer has.
func (s *Store) dropLease(lease clientv3.LeaseID) {
	s.leaseMu.Lock()
	if s.lease == lease {
		s.lease = 0
	}
	s.leaseMu.Unlock()
}

var _ cas.ExclusiveCommitter = (*Store)(nil)

// CommitExclusive implements cas.ExclusiveCommitter with the hold keys of
// UpdateExclusive: one transaction creates the hold of every key at once
// (all or none, so holders cannot deadlock; while another update holds
// one of them it waits, polling) and reads the keys; fn runs; one
// transaction checks every op's version and that every hold is still
// this call's, applies the ops and deletes the holds. Meanwhile writers
// of the held keys wait, as for UpdateExclusive. A holder that stops
// answering loses the keys when the lease expires; its late commit is
// refused. Both transactions count against --max-txn-ops: at most half
// of Limits.MaxCommitOps keys, and ops plus keys at most MaxCommitOps.
func (s *Store) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	const op = "exclusive commit"
	if err := s.limits.CommitExclusive(ctx, keys); err != nil {
		return nil, err
	}
	maxOps := s.limits.WithDefaults().MaxCommitOps
	if 2*len(keys) > maxOps {
		return nil, fmt.Errorf("etcdcas: %s: %w: %d keys, at most %d (two transaction operations each)", op, cas.ErrTooLarge, len(keys), maxOps/2)
	}
	token := writeid.Random()
	hks := make([]string, len(keys))
	for i, k := range keys {
		hks[i] = s.holdKey(k)
	}
	held, committed := false, false
	// Every path out that did not commit ends the holds this call has, a
	// panic in fn included (best effort: they expire with their lease).
	defer func() {
		if !held || committed {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
		defer cancel()
		dels := make([]clientv3.Op, len(hks))
		for i, hk := range hks {
			dels[i] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(hk), "=", token)}, []clientv3.Op{clientv3.OpDelete(hk)}, nil)
		}
		_, _ = s.cli.Txn(rctx).Then(dels...).Commit()
	}()
	cur := make([]cas.Item, len(keys))
	var poll ctxwait.Poll
	for {
		lease, err := s.holdLease(ctx)
		if err != nil {
			return nil, &readError{key: keys[0], err: err}
		}
		cmps := make([]clientv3.Cmp, len(keys))
		then := make([]clientv3.Op, 0, 2*len(keys))
		for i := range keys {
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(hks[i]), "=", 0)
			then = append(then, clientv3.OpPut(hks[i], token, clientv3.WithLease(lease)))
		}
		for _, k := range keys {
			then = append(then, clientv3.OpGet(s.dataKey(k)))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(then...).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.dropLease(lease) // expired meanwhile: take another
			continue
		}
		if err != nil {
			held = true // the answer may have been lost: the holds may exist
			return nil, &readError{key: keys[0], err: err}
		}
		if held = resp.Succeeded; held {
			for i, k := range keys {
				cur[i] = cas.Item{Key: k}
				if kvs := resp.Responses[len(keys)+i].GetResponseRange().Kvs; len(kvs) > 0 {
					if cur[i], _, err = s.item(k, kvs[0]); err != nil {
						return nil, err
					}
				}
			}
			break
		}
		if err := poll.Wait(ctx); err != nil {
			return nil, err
		}
	}
	ops, err := fn(cur)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	if len(ops)+len(keys) > maxOps {
		return nil, fmt.Errorf("etcdcas: %s: %w: %d ops and %d holds in one transaction, at most %d", op, cas.ErrTooLarge, len(ops), len(keys), maxOps)
	}
	cmps, writes, reads, id, firstPut := s.commitTxn(ops)
	for _, hk := range hks {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(hk), "=", token))
		writes = append(writes, clientv3.OpDelete(hk))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(writes...).Else(reads...).Commit()
	if err != nil {
		rev, rerr := s.resolveCommit(ctx, ops, firstPut, id, err)
		if rerr != nil {
			return nil, rerr
		}
		committed = true
		return commitVersions(ops, rev), nil
	}
	if !resp.Succeeded {
		if err := s.commitConflict(ops, resp); err != nil {
			return nil, err
		}
		// Every version matched: a hold was lost (its lease expired
		// while fn ran). Nothing was written.
		return nil, &cas.ConflictError{Key: ops[0].Key, Expected: ops[0].Expected,
			Err: fmt.Errorf("etcdcas: the exclusive hold outlived its lease (Config.ExclusiveTTL %v); nothing was written", s.exclusiveTTL)}
	}
	committed = true
	return commitVersions(ops, resp.Header.Revision), nil
}
