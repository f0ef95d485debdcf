// Package story runs occkit's lock stories: scripted scenarios in which a
// lock fails the way locks fail in production (a holder paused past its
// TTL, a Redlock node whose clock jumps, a holder cut off from the lock
// service, a crowd on one key), run for real against real servers in each
// lock mode, recorded as a timeline of events per client and checked at
// the end for lost updates and accepted stale writes. `occbench story`
// runs them and draws the timelines in a self-contained HTML page.
package story
