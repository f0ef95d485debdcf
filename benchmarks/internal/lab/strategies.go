package lab

import (
	"context"

	"github.com/occkit/occkit/benchmarks/internal/locks"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

// The strategies every backend runs: occkit's own (occ, occ-cached,
// occ-txn, hybrid, adaptive) and the in-process lock. Baselines that lock
// through a server live in a file per service (strategies_etcd.go,
// strategies_postgres.go, strategies_redis.go, strategies_redlock.go,
// strategies_zookeeper.go, strategies_mysql.go).

var coreStrategies = []strategySpec{
	{
		Name:      "occ",
		Kind:      kindOptimistic,
		About:     "occ.Update: read, mutate, compare-and-swap, retry with backoff on conflict",
		SingleKey: true,
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			return updating(h, h.opts), nil
		},
	},
	{
		Name:      "occ-no-turns",
		Kind:      kindOptimistic,
		About:     "occ.Update with occ.WithTurns(false): the calls of a process do not take turns at a hot key (more throughput, a longer tail); only when asked for",
		SingleKey: true,
		DefaultOn: func(string, bool) bool { return false },
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			return updating(h, h.withOptions(occ.WithTurns(false))), nil
		},
	},
	{
		Name:      "occ-no-exclusive",
		Kind:      kindOptimistic,
		About:     "occ.Update with occ.WithExclusiveAfter(0): a call that keeps losing to other processes never takes the store's exclusive path (cas.Exclusive), as before it existed; the A/B of the escalation (only when asked for)",
		SingleKey: true,
		DefaultOn: func(string, bool) bool { return false },
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			return updating(h, h.withOptions(occ.WithExclusiveAfter(0))), nil
		},
	},
	{
		Name:      "occ-cached",
		Kind:      kindOptimistic,
		About:     "occ.Update (occ.Txn for several keys) with a shared occ.Cache: a warm update is one conditional write",
		SingleKey: true, MultiKey: true,
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			cache := h.newCache()
			perWorker := h.withOptions(occ.WithCache(cache))
			return strategyFunc(func(ctx context.Context, w int, op operation) error {
				opts := perWorker[w]
				if len(op.Keys) > 1 {
					return occ.Txn(ctx, h.Store, txnBody(h, op), opts...)
				}
				_, _, err := occ.Update(ctx, h.Values, op.Keys[0], mutateOne(op), opts...)
				return err
			}), nil
		},
	},
	{
		Name:      "occ-combine",
		Kind:      kindOptimistic,
		About:     "occ.Update with occ.WithCombiner (one occ.NewCombiner per process per cell) and, on networked backends, the version cache: concurrent updates of one key in a process queue behind one leader, which applies them in order and writes once",
		SingleKey: true,
		New:       occCombine,
	},
	{
		Name:      controlName,
		Kind:      kindOptimistic,
		About:     "the A/A control: occ-combine again, as a second strategy of the point; its ratio to occ-combine shows what differences the lab resolves on this machine (only when asked for)",
		SingleKey: true,
		DefaultOn: func(string, bool) bool { return false },
		New:       occCombine,
	},
	{
		Name:      "occ-txn",
		Kind:      kindOptimistic,
		About:     "occ.Txn: read every key, buffer the writes, commit them atomically if no read version changed",
		SingleKey: true, MultiKey: true,
		// On single-key workloads occ-txn is occ.Update's cost plus the
		// transaction's bookkeeping: the default grid runs it on
		// multi-key workloads only, where it stands for occ.
		DefaultOn: func(_ string, multiKey bool) bool { return multiKey },
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			return strategyFunc(func(ctx context.Context, w int, op operation) error {
				return occ.Txn(ctx, h.Store, txnBody(h, op), h.Options(w)...)
			}), nil
		},
	},
	{
		Name:      "occ-txn-combine",
		Kind:      kindOptimistic,
		About:     "occ.Txn with occ.WithCombiner (one occ.NewCombiner per process per cell): while a commit of the process's transactions is in flight the next ones queue, and one Txn runs them in order and commits them at once",
		MultiKey:  true,
		DefaultOn: func(_ string, multiKey bool) bool { return multiKey },
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			c := occ.NewCombiner()
			perWorker := h.withOptions(occ.WithCombiner(c))
			return strategyFunc(func(ctx context.Context, w int, op operation) error {
				return occ.Txn(ctx, h.Store, txnBody(h, op), perWorker[w]...)
			}), nil
		},
	},
	{
		Name:      "occ-txn-serial-reads",
		Kind:      kindOptimistic,
		About:     "occ-txn without tx.Prefetch: one Get per key, one round trip each, as before cas.BatchGetter; the A/B of the batched read (only when asked for)",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(string, bool) bool { return false },
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			return strategyFunc(func(ctx context.Context, w int, op operation) error {
				return occ.Txn(ctx, h.Store, txnBodySerial(h, op), h.Options(w)...)
			}), nil
		},
	},
	{
		Name:      "hybrid",
		Kind:      kindHybrid,
		About:     "hybrid.Update: the backend's lease lock, then a fenced compare-and-swap; several keys: hybrid.Txn (leases in key order, then occ.Txn)",
		SingleKey: true, MultiKey: true,
		New: func(ctx context.Context, h *harness) (cellStrategy, error) {
			l, err := h.Locker(ctx)
			if err != nil {
				return nil, err
			}
			// Several keys: hybrid.Txn, leases in key order (named
			// as hybrid.Update names them), then one optimistic
			// transaction whose commit checks every version read,
			// which is what makes the write safe if a lease was lost;
			// hybrid.Update's fenced write covers one key only.
			return strategyFunc(func(ctx context.Context, w int, op operation) error {
				if len(op.Keys) > 1 {
					return hybrid.Txn(ctx, l, h.Store, op.Keys, txnBody(h, op), h.Options(w)...)
				}
				_, _, err := hybrid.Update(ctx, l, h.Values, op.Keys[0], mutateOne(op), h.Options(w)...)
				return err
			}), nil
		},
	},
	{
		Name:      "adaptive",
		Kind:      kindAdaptive,
		About:     "hybrid.UpdateAdaptive (default settings, and the version cache on networked backends, as occ-combine): combined occ.Update; a key locks only when conflicts with writers elsewhere cost more than the lock",
		SingleKey: true,
		New: func(ctx context.Context, h *harness) (cellStrategy, error) {
			l, err := h.Locker(ctx)
			if err != nil {
				return nil, err
			}
			a := hybrid.NewAdaptive(l, hybrid.AdaptiveConfig{})
			perWorker := h.withOptions(h.cacheOption()...)
			return strategyFunc(func(ctx context.Context, w int, op operation) error {
				_, _, err := hybrid.UpdateAdaptive(ctx, a, h.Values, op.Keys[0], mutateOne(op), perWorker[w]...)
				return err
			}), nil
		},
	},
	{
		Name:      "lock-local",
		Kind:      kindLock,
		About:     "a sync.Mutex per key in this process around read, work and write (correct only while one process writes)",
		SingleKey: true, MultiKey: true,
		New: func(_ context.Context, h *harness) (cellStrategy, error) {
			return lockedDo(h, "", locks.NewLocal(h.Keys)), nil
		},
	},
}

// mutateOne adapts a single-key operation to occ.Update's mutate function.
func mutateOne(op operation) func(cur int64, exists bool) (int64, error) {
	return func(cur int64, _ bool) (int64, error) {
		v := [1]int64{cur}
		if err := op.Apply(v[:]); err != nil {
			return 0, err
		}
		return v[0], nil
	}
}

// keyArgs is keys as a query's arguments: the FOR UPDATE strategies
// (lock-pg-for-update, lock-mysql-for-update) lock their keys with one
// SELECT ... WHERE key IN (...).
func keyArgs(keys []string) []any {
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	return args
}

// txnBody is an occ.Txn function for op: read every key (in one round
// trip, tx.Prefetch), apply, put every key.
func txnBody(h *harness, op operation) func(tx *occ.Tx) error {
	body := txnBodySerial(h, op)
	return func(tx *occ.Tx) error {
		if len(op.Keys) > 1 {
			if err := tx.Prefetch(op.Keys...); err != nil {
				return err
			}
		}
		return body(tx)
	}
}

// txnBodySerial is txnBody reading one key at a time.
func txnBodySerial(h *harness, op operation) func(tx *occ.Tx) error {
	codec := h.Values.Codec()
	return func(tx *occ.Tx) error {
		var vals [4]int64
		n := len(op.Keys)
		for i, k := range op.Keys {
			b, ok, err := tx.Get(k)
			if err != nil {
				return err
			}
			vals[i] = 0
			if ok {
				if err := codec.Unmarshal(b, &vals[i]); err != nil {
					return &cas.CodecError{Key: k, Decode: true, Err: err}
				}
			}
		}
		if err := op.Apply(vals[:n]); err != nil {
			return err
		}
		for i, k := range op.Keys {
			b, err := h.Values.Encode(k, vals[i])
			if err != nil {
				return err
			}
			tx.Put(k, b)
		}
		return nil
	}
}

// controlName is the A/A control's strategy: occ-combine under a second
// name.
const controlName = "occ-combine-control"

// occCombine makes an occ-combine cell.
func occCombine(_ context.Context, h *harness) (cellStrategy, error) {
	// One combiner and one cache per process, shared by its
	// workers, as a service would hold them.
	c := occ.NewCombiner()
	return updating(h, h.withOptions(append([]occ.Option{occ.WithCombiner(c)}, h.cacheOption()...)...)), nil
}
