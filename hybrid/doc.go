// Package hybrid combines a cheap lease lock with a fenced conditional
// write: the lock serialises writers of a hot key so that few optimistic
// attempts are wasted, and the fencing token checked by the write itself
// makes a lost lock harmless.
//
// This package defines the [Locker] and [Lease] contract the adapters'
// lockers implement; the hybrid Update and the adaptive mode build on it.
package hybrid
