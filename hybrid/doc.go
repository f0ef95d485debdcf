// Package hybrid combines a cheap lease lock with a fenced conditional
// write: the lock serialises the writers of a hot key so that few
// optimistic attempts are wasted, and the fencing token, checked by the
// write itself, makes a lost lock harmless.
//
// # Leases and fencing
//
// A [Locker] grants a [Lease] on a key; every grant carries a [Lease.Token]
// larger than all earlier grants of that key, and the lease's
// [Lease.Context] is cancelled when it is lost. A lease alone protects
// nothing: its holder can pause past the lease's expiry and write after
// another holder has. [Update] therefore writes through
// cas.FencedStore.CompareAndSwapFenced, which refuses a token smaller than
// one the key has already accepted (cas.ErrFenced), together with the usual
// version check.
//
// Lockers: [NewLocalLocker] (in process), etcdcas.NewLocker (etcd leases,
// revision tokens), pgcas.NewLocker (PostgreSQL advisory locks, sequence
// tokens), rediscas.NewLocker (a Redis key with a TTL, counter tokens).
// Every one releases by (key, token), never by key alone, cancels a lost
// lease's Context with a cause matching [ErrLeaseLost], refuses a nil
// context (cas.ErrNilContext), and passes hybrid/lockertest, the locker
// conformance suite. A lease that knows when it expires is an
// [ExpiringLease].
//
// # Update
//
// [Update] acquires, reads, mutates, refuses to send the write when the
// lease is lost or less than a safety margin of an [ExpiringLease] remains
// ([ErrLeaseExpiring]; the margin is [DefaultSafetyMargin] or a fifth of
// the lease's time, whichever is smaller, or the one given to
// [WithSafetyMargin]), writes fenced, and releases; a fenced-off,
// conflicted, lost or expiring attempt is retried with a fresh lease
// through occ's retry loop, with occ's options.
//
// # Adaptive
//
// [Adaptive] and [UpdateAdaptive] send each key through occ.Update
// (combining the concurrent updates of a key in this process) or through
// [Update], whichever a model of the two paths says carries the key's
// updates faster: the lease path only when contention with writers
// elsewhere has slowed the optimistic attempts so far that one update per
// lease carries more than one batch per attempt, with hysteresis and
// bounded statistics, kept only for the keys whose updates conflict.
//
// # Observing
//
// [ObserveLocker] wraps a Locker and tells a [LockObserver] about every
// acquisition (its wait) and the end of every lease (how long it was
// held; released or lost, and why); a Locker that renews in the
// background counts its renewals ([RenewalCounter]). occ's observers see
// Update's and Txn's attempts as ops [OpUpdate] and [OpTxn], and a write
// refused for a stale token as an attempt whose error matches
// cas.ErrFenced. Package occ/occotel turns all of it into OpenTelemetry
// metrics and spans; docs/operations.md reads them.
//
// See docs/hybrid.md for when to use which.
package hybrid
