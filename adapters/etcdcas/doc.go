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
// # Reads from followers
//
// By default Get and GetMany are linearizable: the member the client
// talks to first confirms with the leader (etcd's ReadIndex) that its
// state is current. With Config.SerializableReads they are serializable
// instead: the member answers from its own state at once. That saves, on
// every read, a round trip from a follower to the leader and the leader's
// round to a quorum (or, on the leader, its quorum round), and the reads
// of a cluster spread over all its members instead of all loading the
// leader; a member cut off from the leader still answers them. It costs
// freshness: Get may return an older state of a key than the latest
// acknowledged write (a follower's state lags the leader's by its apply
// delay, usually milliseconds, and a partitioned member's until the
// partition heals), though always a state the key really had, at the
// version that state was written with.
//
// For occ that is safe. The write is conditional on the version read, and
// only the leader decides it: a write made from a stale version conflicts,
// and the *cas.ConflictError carries the key's current state read in the
// same transaction, on the linearizable path, so occ.Update retries from
// it without another read. A stale read costs one more write attempt;
// nothing is lost or applied twice. The reads whose answer decides an
// outcome stay linearizable whatever the setting: a conflict's current
// state, the read-back that resolves a write whose answer was lost, the
// reads of UpdateExclusive and CommitExclusive under their hold,
// KeysWithPrefix, and the Locker's. Use SerializableReads where updates
// dominate and a caller does not need Get to show the latest write (read
// your writes is not kept across members); cas/castest runs the store this
// way on a three-member cluster with Harness.StaleReads.
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
