package cas

import (
	"context"
	"time"
)

// Exclusive is a Store that can run one read-modify-write of a key that
// no other write of the key can overtake: it holds the key (a row lock)
// from the read to the write, and every other write of the key meanwhile
// waits for it or is refused. It is the store's own queue, the one a
// pessimistic lock such as SELECT ... FOR UPDATE waits in, offered to the
// optimistic path as an escalation: occ.Update takes it for a call that
// has lost several conditional writes in a row (to writers in other
// processes: inside one process, calls take turns), so that a hot key
// does not make that call fail where a lock would have served it, while
// calls that do not lose pay nothing for it.
//
// A holder that dies or stops answering loses the key after a bound the
// adapter documents (a transaction killed when its session goes idle or
// its connection drops), and its write, if it comes later, is refused:
// nothing is lost or applied twice.
type Exclusive interface {
	Store

	// UpdateExclusive reads key's current item (Version 0 when absent),
	// calls fn with it while holding the key, and, when fn returns
	// write == true, writes next at the item's version, returning the
	// new version (the item's when nothing was written). fn's error ends
	// the call, writes nothing and is returned as is. fn runs on the
	// caller's goroutine, once, and must not write the key itself.
	UpdateExclusive(ctx context.Context, key string, fn func(cur Item) (next []byte, write bool, err error)) (Version, error)
}

// ExclusiveCommitter is a Committer that can run one multi-key
// read-modify-write that no other write of its keys can overtake: it
// holds every key (row locks, taken in key order, so that two such
// commits cannot deadlock) from the read to the commit. It is Exclusive
// for transactions: occ.Txn escalates to it for a transaction that has
// lost several commits in a row to writers elsewhere.
type ExclusiveCommitter interface {
	Committer

	// CommitExclusive reads the current item of each of keys (Version 0
	// when absent) while holding them, calls fn with them in keys'
	// order, and applies the ops fn returns atomically, as Commit does:
	// every op's version is checked (an op on a key not among keys is
	// checked without a hold), and a failed check is a *ConflictError
	// naming the first such op. It returns one version per op, as Commit
	// does. fn's error ends the call, writes nothing and is returned as
	// is; no ops write nothing. fn runs once, on the caller's goroutine,
	// and must not write the keys itself. Keys must be at least one,
	// valid and distinct (Limits.CommitExclusive): no keys fail with
	// ErrInvalidCommit, an invalid or repeated key with ErrInvalidKey.
	CommitExclusive(ctx context.Context, keys []string, fn func(cur []Item) ([]Op, error)) ([]Version, error)
}

// ExclusiveAfterHint is an Exclusive store that names its own default for
// how many conditional writes in a row a call may lose before occ.Update
// escalates it to UpdateExclusive (occ.DefaultExclusiveAfter otherwise).
// A store whose exclusive attempt costs about what an optimistic attempt
// costs (the same round trips, the key held for one of them) can afford
// to escalate sooner and cut the tail of the calls that keep losing; one
// whose exclusive attempt is dearer keeps the default. An explicit
// occ.WithExclusiveAfter wins over the hint; a hint <= 0 is ignored.
type ExclusiveAfterHint interface {
	Exclusive

	// ExclusiveAfter returns the store's default escalation count.
	ExclusiveAfter() int
}

// HotCommitHint is an ExclusiveCommitter on which a transaction touching
// a key that has just conflicted does better to commit holding its keys
// at once than to try an optimistic commit first. On a store where a
// write that meets a held row waits for the holder and then fails (the
// row's version moved), optimistic commits at a key that escalated
// transactions hold are lost work that also stands in the holders' queue;
// when an exclusive commit costs about what an optimistic one does, a hot
// key is best served by holding it. occ.Txn reads as usual, then, when
// one of the keys its function touched conflicted twice in this process
// within the last HotCommitFor, commits with CommitExclusive (running the
// function again under the hold) instead of Commit. Keys cool when their
// commits stop conflicting. occ.WithExclusiveAfter(0) turns it off with
// the rest of escalation.
type HotCommitHint interface {
	ExclusiveCommitter

	// HotCommitFor returns the window in which two conflicts at a key
	// make it hot; 0 or less: never hot, every commit tries
	// optimistically first.
	HotCommitFor() time.Duration
}
