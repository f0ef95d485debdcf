// Package cas is occkit's contract for versioned stores: a key's state is an
// [Item] with a [Version], and every write is conditional on the version the
// writer last saw.
//
// # Versions
//
// A [Version] is the number a store gave a key's current state; 0 means the
// key does not exist. A key's versions strictly increase over its whole
// history and are never reused, also after a delete and re-create, so a
// writer holding version 7 can never overwrite a state it has not seen (no
// ABA).
//
// # The store contract
//
// [Store] has three methods: Get, CompareAndSwap (write only if the version
// is still the expected one; 0 creates) and CompareAndDelete. Optional
// capabilities are extra interfaces, found with a type assertion or with
// [AsFenced] and [AsCommitter] (which return an error matching
// errors.ErrUnsupported):
//   - [FencedStore] checks a lock's fencing token in the write itself;
//   - [Committer] applies checks, puts and deletes on several keys
//     atomically;
//   - [BatchGetter] reads several keys in one round trip ([GetMany] falls
//     back to one Get per key);
//   - [Lister] lists keys by prefix (for tools and anti-entropy).
//
// # Errors
//
// Errors are matched with errors.Is: [ErrConflict] (the concrete
// [*ConflictError] carries the current item when the backend returned it in
// the same round trip), [ErrNotFound], [ErrAmbiguous], [ErrFenced]
// ([*FencedError]), [ErrTooLarge], [ErrInvalidKey], [ErrInvalidVersion],
// [ErrInvalidCommit] and [ErrNilContext]. Adapters keep their backend's native error reachable
// with errors.As.
//
// # Validation
//
// Keys are non-empty UTF-8 text without NUL bytes. [Limits] holds the sizes
// an adapter accepts and validates every request before anything is sent,
// so every adapter rejects bad input the same way and loses nothing.
//
// # Typed values
//
// [Typed] wraps a Store with a [Codec], such as [JSON], so that callers
// read and write Go values. occ.Update takes a *Typed.
//
// The conformance suite every adapter passes is
// [github.com/occkit/occkit/cas/castest].
package cas
