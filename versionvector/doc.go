// Package versionvector tracks causality for data written in several places
// at once: version vectors, dotted version vector sets (DVVSets), and a
// replicated register that keeps concurrent writes as siblings instead of
// letting one silently overwrite the other.
//
// A single [cas.Version] is enough while every write of a key goes through
// one store that orders them. When two regions each take writes for the same
// key and exchange them later, there is no single order: the question is no
// longer "is this the latest version?" but "had the writer of this value seen
// that one?". Version vectors answer it.
//
//	eu := memcas.New()  // one store per region
//	us := memcas.New()
//	carts := versionvector.NewRegister(eu, cas.JSON[Cart](),
//		versionvector.ResolveOnRead(versionvector.MergeWith(union)))
//
//	vals, cc, err := carts.Get(ctx, "cart/42") // siblings and causal context
//	if err != nil && !errors.Is(err, cas.ErrNotFound) {
//		return err
//	}
//	var cart Cart // a new key: no values, and cc is the zero context
//	if len(vals) > 0 {
//		cart = vals[0] // resolved on read: at most one
//	}
//	err = carts.Put(ctx, "cart/42", cc, add(cart, "book"), "eu")
//	_, err = versionvector.Sync(ctx, eu, us, "cart/42") // anti-entropy
//
// # Version vectors
//
// A [Vector] maps replica IDs to counters; [Compare] says whether one vector
// happened [Before], [After], is [Equal] to or [Concurrent] with another,
// [Merge] is their least upper bound, [Descends] asks "has a seen all of
// b?", and [Vector.Increment] records a new event. Vectors have a compact,
// canonical binary encoding and a JSON one (both with sorted IDs); the
// decoders accept only what the encoders write and report anything else as
// a [*DecodeError] matching [ErrMalformed].
//
// # Dotted version vector sets
//
// A [Set] holds a key's siblings and, per replica, one counter: each stored
// value carries a dot (replica, counter) and a write made with a causal
// context discards exactly the values whose dots the context covers
// ([Set.Update], [Set.Discard]). [Set.Sync] merges two copies of a key's set,
// [Set.Values] lists the siblings and [Set.Join] is the context a reader
// gets. The siblings are exactly the writes no later write has seen, so
// stale or repeated contexts never pile up copies, and the size grows with
// the number of replicas, not of clients. This is the structure of Almeida,
// Baquero, Gonçalves, Preguiça and Fonte, "Scalable and Accurate Causality
// Tracking for Eventually Consistent Stores" (2014), as used by Riak.
//
// # The replicated register
//
// [Register] keeps a Set per key in any [cas.Store], encoded with
// [SetCodec]: [Register.Get] returns the siblings and an opaque
// [CausalContext]; [Register.Put] takes the key, the context the writer
// read, the value and the writing replica's ID, and stores the updated set
// with a compare-and-swap retried by occ.Update. A replica ID names a store
// (a region), not a client: every write with one ID goes to the same store.
//
// # Resolving siblings
//
// A [Resolver] collapses siblings into one value: [LastWriterWins] by a
// field the user picks, [MergeWith] a merge function (a union, say), or any
// function. [ResolveOnRead] makes Get return one value, [ResolveOnWrite]
// makes Put store one.
//
// # Anti-entropy
//
// [Sync] merges one key between two stores, [SyncKeys] a list of keys, and
// [SyncPrefix] every key under a prefix of two stores that implement
// [Lister] (others make it fail with an error matching
// errors.ErrUnsupported). Sync moves encoded values without decoding them,
// so one pass serves registers of every type.
//
// # Retiring a replica
//
// Each replica that has ever written a key costs that key 2 bytes, its ID
// and its counter (14 bytes for an ID like "eu-west-1" below 2²¹ writes),
// forever, unless it is pruned. To retire a replica:
// stop its writes; run anti-entropy between every pair of stores until all
// hold the same sets; then, with anti-entropy paused, run [Prune] on every
// key of every store (or [Set.Prune], [Vector.Prune] on values you keep
// yourself). Pruning drops only entries that hold no sibling. Pruning
// earlier is unsafe: a store that has not yet heard that one of the retired
// replica's values was superseded would bring it back on the next Sync. A
// Sync between a pruned and an unpruned store, or a client's old context,
// only brings the entry back without values: prune again.
//
// # Concurrency
//
// [Set], [CausalContext] and [SyncStats] are immutable values; a [Vector] is
// a map, safe for concurrent reads. A [Register] is safe for concurrent use
// if its store and codec are. Nothing in the package starts a goroutine.
package versionvector
