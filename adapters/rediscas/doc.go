// Package rediscas is a [cas.Store] on Redis, with fenced writes, atomic
// multi-key commits and a lease lock ([Locker]) whose fencing tokens come
// from a counter in Redis, for hybrid.Update.
//
// # Layout
//
// Under Config.Prefix (default "occkit:"):
//
//	<prefix>d:<key>   a hash: the key's value, version, history and fence
//	<prefix>version   the store's version counter (a string)
//
// The hash fields are
//
//	v  the value; the key exists while its hash has v
//	n  the version
//	h  the history: the key's last Config.History writes (default 8), puts
//	   and deletes, newest first, 24 bytes each: the write's 16-byte id and
//	   the version it replaced (8 bytes big-endian; 0 for a create)
//	f  the largest fencing token that wrote the key, 20 decimal digits
//
// A delete removes v and n and leaves the history and the fence as a
// tombstone, invisible to Get. A tombstone with a fence is kept for good
// (the token must survive the delete, as cas.FencedStore requires); one
// without expires after Config.TombstoneTTL (default 1 min). Keys are
// changed only by the store's Lua scripts. A key costs its value plus
// about 250 bytes with the default history.
//
// # Scripts
//
// Every write is one Lua script, run with EVALSHA and, when the server has
// not cached it (a restart, a failover), EVAL; Redis runs a script
// atomically. CompareAndSwap and CompareAndSwapFenced look for their own
// write id in the history (a write sent twice reports the first one's
// outcome), then check the fencing token (a stale token beats a version
// conflict), then the version, and write the value with a new version from
// the counter (one more than its last, and at least the server's clock in
// microseconds, so that a failover cannot hand a version out again); a
// refusal returns the current item, so a conflict carries it (one round
// trip, [cas.ConflictError.HasCurrent]).
// CompareAndDelete and Commit work the same way; Commit checks every
// operation's version before it writes anything. Get is one HMGET.
//
// # Versions, fences and tokens
//
// Versions come from one counter per store, which deletes do not touch, so
// a key's versions strictly increase over its whole life and are never
// reused after a delete and re-create. Fencing tokens are compared as
// 20-digit strings, exactly over the whole uint64 range (Lua numbers are
// doubles). The Locker's tokens come from a counter per lock key, the
// same way.
//
// # Redis Cluster
//
// New takes a *redis.ClusterClient (any redis.UniversalClient) in one of
// two layouts:
//
//   - A prefix without a brace ("occkit:"): keys spread over the
//     cluster's slots, each key's hash on the master of its slot. Every
//     script runs on one node over keys of one slot, and declares each of
//     them: a key's hash, the version counter of its slot
//     (<prefix>version{<tag>}, one per slot in use, where <tag> is a short
//     hash tag of that slot) and, for deltas, a record in the same slot.
//     Versions of a key still strictly increase over its whole life: a key
//     stays in its slot, and its slot's counter only grows. A commit (and
//     an exclusive commit, and so occ.Txn) must keep to one slot: give the
//     keys of one commit a common hash tag ("{order:7}:head",
//     "{order:7}:line:1"). A commit over several slots is refused with a
//     *CrossSlotError (errors.Is(err, ErrCrossSlot)) before anything is
//     sent, never with the server's CROSSSLOT.
//   - A prefix with a hash tag ("{orders}:"): every key of the store, and
//     its one counter, in that tag's slot, on one master; any keys commit
//     together. Spread load with several stores (prefixes).
//
// A prefix with a brace but no whole tag is refused. A *redis.Ring has no
// slots: it needs a prefix with a hash tag. Reads go to masters: do not
// route them to replicas (ClusterOptions.ReadOnly), or Get may return
// stale versions (a stale version only makes the conditional write
// conflict, but reads of the outcome of a lost answer must see the
// master).
//
// # Durability
//
// The store is as durable as the server. Redis replicates asynchronously:
// a failover can lose acknowledged writes, including increments of a
// version counter. Versions and lock tokens are at least the server's
// clock in microseconds, so that the promoted replica does not hand out
// again those the lost writes took, unless its counter had run ahead of
// its clock (a clock stepped back, a master whose clock ran fast) by more
// than the failover took, or two masters took writes at once (see
// docs/redis.md). Config.WaitReplicas closes most of that gap: each write is
// sent in one pipeline with a replicated no-op of its slot's counter and
// WAIT, on the connection of the slot's master, and a write that fewer
// replicas acknowledged within Config.WaitTimeout returns a
// *cas.AmbiguousError holding a *ReplicationError (it applied on the
// master; whether it survives a failover is not known). WAIT does not
// make Redis strongly consistent (a replica that acknowledged may still
// not be the one promoted), but with one replica per master and
// WaitReplicas 1 a write reported done is on two servers. Otherwise run
// Redis with persistence (appendonly yes, appendfsync always for the
// strictest setting) and without automatic failover, or accept the risk,
// when versions must never repeat. docs/redis.md has the failover
// measurements.
//
// # Limits
//
// Config.Limits (a cas.Limits, as in every adapter) sets them: values at
// most MaxValueBytes (default 1 MiB, at most MaxValueLimit, under Redis's
// 512 MiB bulk string limit); keys at most MaxKeyBytes (default 1024
// bytes); commits at most MaxCommitOps operations (default 100) and
// MaxCommitBytes (default and maximum: the constant MaxCommitBytes). A
// limit above Redis's maximum is refused by New. Input over a limit fails
// with cas.ErrTooLarge or cas.ErrInvalidKey before anything is sent.
//
// # Errors
//
// A conflict is a *cas.ConflictError with the current item; a stale token a
// *cas.FencedError with the highest token. Writes are sent at most once by
// the client: they are marked not to be re-sent by go-redis, whatever its
// MaxRetries, because a write re-sent after it applied and was overwritten
// would come back as a conflict, and its caller would apply the change
// twice. A write whose answer was lost is resolved by the store itself,
// within Config.ResolveTimeout. While the caller's context lives, it sends
// the write again with the same write id: the script finds its own write
// in the history, and the version check keeps it from applying twice. Then
// it reads the key's history: the write id there means success; the
// version the write expected named as replaced by another write means it
// never applied (a version is replaced once), and the caller gets that
// conflict. Otherwise — the version was replaced longer ago than the history
// reaches, or the write was a create, and Redis keeps no more history to
// tell whether the write applied in between — the caller gets a
// *cas.AmbiguousError with the write id. How far back the history reaches
// decides how often that happens: on a hot key, a write that lost its race
// after a backoff expects a version many writes old, and its lost answer
// stays ambiguous unless Config.History covers those writes (24 bytes per
// entry and key).
//
// Failures that certainly applied nothing and are worth another try
// (LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY, BUSY, a connection
// that could not be made) and failed reads match [Retryable]; pass it to
// occ.WithRetryable. go-redis errors stay reachable with errors.As.
//
// # Lease lock
//
// [Locker] implements hybrid.Locker: SET NX PX with a token from a counter
// in one script, a watchdog goroutine per lease renewing it every TTL/3,
// release and renewal checked against the grant's token and holder id. See
// its documentation.
//
// # Concurrency
//
// Store, Locker and Lease are safe for concurrent use.
package rediscas
