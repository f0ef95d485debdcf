package etcdcas

import (
	"context"
	"fmt"
	"slices"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Commit implements cas.Committer as one etcd transaction with a compare
// per operation; on failure the Else branch reads every key back, so the
// conflict names the first mismatching key with its current item. Like
// CompareAndSwap, it waits while an exclusive update or commit holds a key
// it writes (see holdCmps), so that it cannot overtake the holder.
func (s *Store) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	cmps, writes, reads, id, firstPut := s.commitTxn(ops)
	holds := s.holdCmps(ops, len(cmps))
	cmps = append(cmps, holds...)
	var poll ctxwait.Poll
	for {
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(writes...).Else(reads...).Commit()
		if err != nil {
			rev, rerr := s.resolveCommit(ctx, ops, firstPut, id, err)
			if rerr != nil {
				return nil, rerr
			}
			return commitVersions(ops, rev), nil
		}
		if resp.Succeeded {
			return commitVersions(ops, resp.Header.Revision), nil
		}
		if err := s.commitConflict(ops, resp); err != nil {
			return nil, err
		}
		if len(holds) == 0 {
			return nil, fmt.Errorf("etcdcas: commit refused but every version matched on read-back")
		}
		// Every version matched: a hold refused it. Wait for the holder,
		// as a writer waits for a row lock (nothing was written, so
		// sending the commit again is safe).
		if err := poll.Wait(ctx); err != nil {
			return nil, err
		}
	}
}

// holdCmps returns the compares that keep a commit of ops, whose
// transaction has used compares already, from overtaking an exclusive
// hold (UpdateExclusive, CommitExclusive) of a key it puts or deletes:
// without them a commit made while the holder runs fn would make the
// holder's write conflict, however often it tried again. etcd counts
// compares against --max-txn-ops (Limits.MaxCommitOps): one per written
// key when they fit; else one over the range of hold keys from the least
// written key to the greatest, which may also wait for holds of keys
// between them; else, for a commit of the most operations the limits
// allow, none.
func (s *Store) holdCmps(ops []cas.Op, used int) []clientv3.Cmp {
	var written []string
	for _, op := range ops {
		if op.Kind == cas.OpPut || op.Kind == cas.OpDelete {
			written = append(written, op.Key)
		}
	}
	room := s.limits.MaxCommitOps - used
	switch {
	case len(written) == 0 || room < 1:
		return nil
	case len(written) <= room:
		cmps := make([]clientv3.Cmp, len(written))
		for i, k := range written {
			cmps[i] = s.notHeld(k)
		}
		return cmps
	}
	lo, hi := slices.Min(written), slices.Max(written)
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.holdKey(lo)), "=", 0).WithRange(s.holdKey(hi) + "\x00")}
}

// commitTxn builds a commit's transaction: a compare of every op's
// version, its writes (puts carry one write id, that of the first put,
// firstPut -1 when there is none) and, for a refusal, a read-back of
// every key.
func (s *Store) commitTxn(ops []cas.Op) (cmps []clientv3.Cmp, writes, reads []clientv3.Op, id writeid.ID, firstPut int) {
	cmps = make([]clientv3.Cmp, 0, len(ops))
	firstPut = -1
	for i, op := range ops {
		dk := s.dataKey(op.Key)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(dk), "=", int64(op.Expected)))
		reads = append(reads, clientv3.OpGet(dk))
		switch op.Kind {
		case cas.OpPut:
			if firstPut < 0 {
				firstPut, id = i, s.ids.Next()
			}
			writes = append(writes, clientv3.OpPut(dk, encodeEnvelope(id, op.Value)))
		case cas.OpDelete:
			writes = append(writes, clientv3.OpDelete(dk))
		}
	}
	return cmps, writes, reads, id, firstPut
}

// commitConflict returns the conflict of a refused commit (the first op
// whose key's read-back is not at its version), nil when every version
// matched.
func (s *Store) commitConflict(ops []cas.Op, resp *clientv3.TxnResponse) error {
	for i, op := range ops {
		rr := (*clientv3.GetResponse)(resp.Responses[i].GetResponseRange())
		var cur int64
		if len(rr.Kvs) > 0 {
			cur = rr.Kvs[0].ModRevision
		}
		if cur != int64(op.Expected) {
			return s.conflict(op.Key, op.Expected, rr)
		}
	}
	return nil
}

func commitVersions(ops []cas.Op, rev int64) []cas.Version {
	out := make([]cas.Version, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case cas.OpPut:
			out[i] = cas.Version(rev)
		case cas.OpCheck:
			out[i] = op.Expected
		}
	}
	return out
}
