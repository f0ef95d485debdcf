// Package etcdcas is a [cas.Store] on etcd v3, with fenced writes, atomic
// multi-key commits and a lease lock whose fencing tokens are etcd
// revisions.
//
// # Versions
//
// A key's version is its etcd ModRevision: the cluster-wide revision of the
// write that last changed it. Revisions only grow, so versions are never
// reused, also after a delete and re-create.
//
// # Layout
//
// Under Config.Prefix (default "occkit/"):
//
//	<prefix>d/<key>   the value: 0x01, a 16-byte write id, the caller's bytes
//	<prefix>f/<key>   the largest fencing token that wrote <key>, 8 bytes big-endian
//
// The write id lets the store find out, after an answer was lost, whether
// its own write was applied. Fence keys are separate from data keys (rather
// than inside the value envelope) so that the token survives a delete of the
// key and can be compared by etcd itself: etcd compares values byte-wise,
// and big-endian tokens compare like numbers. They are never deleted: one
// small key per key ever written with a token.
//
// # One round trip per write
//
// CompareAndSwap is one transaction:
//
//	If(ModRevision(d/key) == expected) Then(Put(d/key)) Else(Get(d/key))
//
// so a conflict carries the current item at no extra cost (expected 0 means
// "absent": etcd compares a missing key's ModRevision as 0).
// CompareAndSwapFenced adds the fence in the same transaction, the stale
// token checked first. Commit is one transaction with a compare per
// operation.
//
// # Deltas
//
// etcd has no server-side arithmetic, so the Store does not implement
// cas.Adder: occ.Add on it is a read and a ModRevision-conditioned write,
// retried on conflict (occ.Update with cas.JSON[int64]'s encoding). It is
// exact, but concurrent deltas of one key conflict as read-modify-writes
// do; the stores that implement cas.Adder do not.
//
// # Limits
//
// Requests must fit etcd's --max-request-bytes (1.5 MiB by default) and
// --max-txn-ops (128); give the server's values in Config and the store
// derives cas.Limits from them, so that a value or commit that would be
// refused fails with cas.ErrTooLarge before anything is sent.
//
// # Errors
//
// A conflict is a *cas.ConflictError with the current item. A write whose
// answer was lost (timeouts, a lost connection, a leader change, the
// caller's context ending in flight) is resolved by reading the key and,
// if it moved on, its history: the write's id found means success; the
// expected version gone without it means the write can never apply, a
// conflict; otherwise the caller gets a *cas.AmbiguousError with the write
// id. Transient failures that certainly applied nothing, and failed reads,
// match [Retryable]; pass it to occ.WithRetryable. Native etcd errors stay
// reachable with errors.As.
//
// # Lease lock
//
// [Locker] implements hybrid.Locker on etcd leases; see its documentation.
//
// Store and Locker are safe for concurrent use.
package etcdcas
