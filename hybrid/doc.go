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
// revision tokens), pgcas.NewLocker (PostgreSQL advisory locks,
// sequence tokens). Every one releases by (key, token), never by key alone.
//
// # Update
//
// [Update] acquires, reads, mutates, refuses to send the write when less
// than a safety margin of the lease remains ([WithSafetyMargin],
// [ErrLeaseExpiring]), writes fenced, and releases; a fenced-off,
// conflicted, lost or expiring attempt is retried with a fresh lease
// through occ's retry loop, with occ's options.
//
// # Adaptive
//
// [Adaptive] and [UpdateAdaptive] send each key through occ.Update while
// it is cool and through [Update] while it is hot, with hysteresis and
// bounded per-key statistics.
//
// See docs/hybrid.md for when to use which.
package hybrid
