package occ

// Test hooks: exported to the package's external tests only.

// LoopCallers exposes loopCallers to the external tests' benchmarks.
var LoopCallers = loopCallers
