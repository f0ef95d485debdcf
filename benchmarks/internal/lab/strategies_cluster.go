package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// The clusters' strategy: occ reading from a follower or replica, the A/B
// of occ, which reads from the leader or primary. On etcd3 and
// postgres-replica the cell's store (h.Store, what every other strategy
// uses) reads linearizably from etcd's leader, or from PostgreSQL's
// primary; occ-follower-reads runs the same occ.Update over a second
// store of the same data whose reads go elsewhere, and which still writes,
// commits and reads a conflict's current state where the cell's store
// does. The two run side by side at every point, so their ratio is read
// like any other (goals.go: goalFollowerEtcd, goalReplicaPG).

var clusterStrategies = []strategySpec{
	{
		Name: "occ-follower-reads",
		Kind: kindOptimistic,
		About: "occ.Update (occ.Txn for several keys) over a store that reads from a follower or replica: on etcd3 serializable reads " +
			"(etcdcas.Config.SerializableReads: the member the client talks to answers from its own state, no ReadIndex round to the leader), " +
			"on postgres-replica the streaming replica (pgcas.Config.ReadPool); writes, commits and a conflict's current state stay on the leader or primary. " +
			"A stale read costs a conflict, never an update. The A/B of occ, which reads from the leader or primary",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(b string, _ bool) bool { return b == "etcd3" || b == "postgres-replica" },
		New:       newFollowerReads,
	},
}

func newFollowerReads(_ context.Context, h *harness) (cellStrategy, error) {
	store, err := h.Backend.FollowerStore(h.NS)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, fmt.Errorf("%v: %w", err, errNotApplicable)
	}
	if err != nil {
		return nil, err
	}
	values := cas.NewTyped(store, h.Values.Codec())
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		if len(op.Keys) > 1 {
			return occ.Txn(ctx, store, txnBody(h, op), h.Options(w)...)
		}
		_, _, err := occ.Update(ctx, values, op.Keys[0], mutateOne(op), h.Options(w)...)
		return err
	}), nil
}
