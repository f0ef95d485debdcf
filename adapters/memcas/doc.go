// Package memcas is an in-process [cas.Store]: a sharded map with
// versioned compare-and-swap, fencing tokens and atomic multi-key commits.
//
// It is the reference adapter: the fastest way to run occ.Update, occ.Txn,
// occ.Add and hybrid.Update in a test or a single process, and the store
// the conformance suite [github.com/occkit/occkit/cas/castest] is first
// run against. It implements cas.Store, cas.FencedStore, cas.Committer,
// cas.BatchGetter, cas.Lister and cas.Adder (a bounded delta under the
// key's shard lock).
//
// # Layout and versions
//
// Keys are spread over 64 shards, each behind its own read-write mutex, so
// operations on different keys rarely wait for each other and reads of one
// key run in parallel. Versions come from one atomic counter shared by all
// keys: a key's versions strictly increase and are never reused, also after
// a delete and re-create. Values are copied on the way in and out; callers
// may keep and modify the slices they pass or receive.
//
// A deleted key that has been written with a fencing token leaves a
// tombstone holding that token, so that a stale holder cannot re-create it;
// other deleted keys leave nothing behind.
//
// # Limits
//
// Keys and values are validated with [cas.Limits]; the defaults are 1 KiB
// keys, 1 MiB values and 100 operations per commit (cas's defaults), and
// [Config].Limits changes them, as in every adapter's Config. Memory has
// no hard maximum: any positive limit is accepted.
package memcas
