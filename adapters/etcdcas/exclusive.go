package etcdcas

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/occkit/occkit/cas"
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
// Meanwhile CompareAndSwap and CompareAndDelete of the key, which require
// the hold key to be absent, are refused with a *cas.ConflictError. A
// holder that stops answering loses the key when its lease expires; its
// late write is refused. Commit and CompareAndSwapFenced do not look at
// holds: one that overtakes a hold makes the holder's write conflict,
// which loses nothing. The lease of a successful update is left to
// expire (revoking it would cost a round trip).
func (s *Store) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	const op = "exclusive update"
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	dk, hk := s.dataKey(key), s.holdKey(key)
	var (
		lease   clientv3.LeaseID
		granted time.Time
	)
	// release ends the hold (if any) by revoking its lease, best effort:
	// the lease expires anyway.
	release := func() {
		if lease == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
		defer cancel()
		_, _ = s.cli.Revoke(rctx, lease)
		lease = 0
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	cur := cas.Item{Key: key}
	wait := 200 * time.Microsecond
	for {
		if lease == 0 || time.Since(granted) > s.exclusiveTTL/2 {
			// A lease granted before a long wait may be gone by the
			// time the hold is free: take the hold with a fresh one.
			release()
			l, err := s.cli.Grant(ctx, int64(math.Ceil(s.exclusiveTTL.Seconds())))
			if err != nil {
				return 0, &readError{key: key, err: err}
			}
			lease, granted = l.ID, time.Now()
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(hk), "=", 0)).
			Then(clientv3.OpPut(hk, token, clientv3.WithLease(lease)), clientv3.OpGet(dk)).
			Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			lease = 0 // expired meanwhile: grant another
			continue
		}
		if err != nil {
			release()
			return 0, &readError{key: key, err: err}
		}
		if resp.Succeeded {
			if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
				if cur, _, err = s.item(key, kvs[0]); err != nil {
					release()
					return 0, err
				}
			}
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			release()
			return 0, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 10*time.Millisecond)
	}
	next, write, err := fn(cur)
	if err != nil || !write {
		release()
		return cur.Version, err
	}
	if err := s.limits.Put(ctx, key, next); err != nil {
		release()
		return 0, err
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
