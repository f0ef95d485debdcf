// Package leasefaults runs the two lease faults of occkit's fault suite
// (make faults: a paused holder, a clock jump) against a lease lock and a fenced store on one backend, and
// checks that a holder whose lease ended without it knowing cannot get a
// stale write in: the fencing token checked by the write, not the lease,
// is what keeps it out.
//
//	srv, _ := backends.Env{}.Reach(ctx, backends.Memory)
//	c, _ := srv.Connect(ctx, backends.ClientOptions{})
//	b, _ := leasefaults.Open(ctx, c, c, "counters", 300*time.Millisecond)
//	results, err := leasefaults.Run(ctx, leasefaults.Config{
//		Backends: []leasefaults.Backend{b},
//		Duration: 2 * time.Second,
//	})
//	for _, r := range results {
//		if err := r.Check(); err != nil { ... } // a stale write got in, or nothing was tested
//	}
//
// # The run
//
// Workers increment counters on a few keys for Config.Duration. Most
// increments are hybrid.Update calls (lease, read, increment, fenced write,
// release). Two thirds of the workers are disturbed holders whenever the
// key they turn to may have one (one per key at a time, on half of the
// keys at most, so that the others keep moving): the grant they hold ends
// on the server while they are in their critical section, and they wait
// there until a holder with a newer grant (a larger token) has written
// the key. One disturbed worker in four is a library holder, inside
// hybrid.Update; the others are rogue holders: they take a lease
// themselves, read, and once superseded ignore their lease entirely, read
// the key's current version (a blind read, so that the version check
// cannot save them) and send their stale increment with their old token
// through CompareAndSwapFenced (reading again after a conflict). A refused
// rogue then does its increment again through hybrid.Update, as a holder
// that learns it lost its lease would. A worker whose increment failed
// waits 10 ms before its next one.
//
// A stale write is a fenced write sent with a token smaller than one that
// has already written the key (an acknowledged write of this run). The
// contract of cas.FencedStore says it must fail with cas.ErrFenced; the
// run counts those accepted, refused and failing otherwise. At the end the
// counters are read through Backend.Direct: final must equal the
// successful increments plus the ambiguous ones that applied (lost = 0,
// duplicated = 0).
//
// # The history
//
// Every call that reaches the store is recorded as an operation on its key
// (package benchmarks/internal/linearcheck), timed from just before it is
// sent to its answer: each Get, a read of the value it returned, and each
// write, from the value of the version it expected (every write follows a
// Get of its key, which returned that version) to the value it sent —
// hybrid.Update's fenced write, a rogue's stale or late fenced write with
// its token, the mutant's plain write. A write succeeded, was refused by
// the fence (cas.ErrFenced), is ambiguous (cas.ErrAmbiguous: it returns at
// the end of time), or failed otherwise (a conflict: it applied nothing,
// and is left out). The final reads join the history. porcupine checks
// each key's history against a compare-and-set register with a fence
// (Result.Linearizable): a read returns the current value; a write
// succeeded only if the value it expected was current and, fenced, its
// token at least the largest that had written the key; a refusal only if
// a larger one had; an ambiguous write may or may not have applied. A
// history longer than Config.HistoryPerKey calls is checked in
// overlapping segments. Result.Check fails a history that is not
// linearizable with ErrUnsafe, one that could not be checked with
// ErrVacuous.
//
// # The faults
//
// paused-holder: the holder's process stops (a GC or VM pause, SIGSTOP)
// inside its critical section, past the end of its grant. Its renewals
// stop with it (the context given to Acquire ends), so on backends whose
// grants run out by themselves (Backend.RunsOut: the in-process locker,
// Redis) the grant ends after its TTL; on the others the run ends it the
// way the server would (Backend.Expire: etcd revokes the holder's session
// lease, PostgreSQL terminates the holder's backend, which frees its
// session advisory lock: a session lock has no TTL, and a paused client
// loses it when the server drops its connection). Library holders may
// notice the loss through the lease's Context before writing; rogue
// holders never look.
//
// clock-jump: the holder's clock is behind (or the lock server's clock
// stepped forward): the server ends the grant early (Backend.Expire: Redis
// loses the lock key, etcd the session lease, PostgreSQL the session) or,
// with no way to do that (the in-process locker), the holder takes longer
// than the TTL believing it has more. Its lease reports an Expires() later
// than the truth by the skew and a Context the loss does not cancel, so
// its safety-margin check (hybrid.WithSafetyMargin, and the same check in
// the rogue holders) passes, and the write goes out with a superseded
// token. On PostgreSQL no clock decides when a session lock ends: there
// the fault is the lock lost on the server while every check the holder
// makes still says it holds it.
//
// Run has a mutant mode for its own tests, in which rogue holders write
// with a plain CompareAndSwap: it must make stale writes get in and lose
// increments (and leave the store's history linearizable: the store did
// nothing wrong), so that a passing run is known not to be vacuous. The
// tests also run stores with a bug — a fenced write acknowledged and not
// applied, a stale read, tokens ignored — whose histories must be found
// not linearizable.
package leasefaults
