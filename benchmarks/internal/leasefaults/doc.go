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
//		Targets: []leasefaults.Target{b},
//		Duration: 2 * time.Second,
//	})
//	for _, r := range results {
//		if err := r.Check(); err != nil { ... } // a stale write got in, or nothing was tested
//	}
//
// The run, the faults and the promise under each are described in
// docs/reliability.md ("The lease faults"). In short: workers increment
// counters through hybrid.Update while disturbed holders lose their grant
// inside their critical section (Target.RunsOut says whether a grant runs
// out by itself; otherwise Target.Expire ends it as the server would) and
// rogue holders among them send stale increments with their old token.
// Every call that reaches the store is recorded on its key and checked
// with benchmarks/internal/linearcheck against a compare-and-set register
// with a fence (Result.Linearizable, in segments of Config.HistoryPerKey
// calls). Result.Check fails a run with a stale write accepted, an
// increment lost or doubled, or a history that is not linearizable
// (ErrUnsafe), and a run that tested nothing (ErrVacuous).
//
// Run has a mutant mode for its own tests, in which rogue holders write
// with a plain CompareAndSwap: it must make stale writes get in and lose
// increments, so that a passing run is known not to be vacuous.
package leasefaults
