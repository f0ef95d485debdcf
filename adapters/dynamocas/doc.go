// Package dynamocas is a [cas.Store] on Amazon DynamoDB (aws-sdk-go-v2),
// with fenced writes, atomic multi-key commits through TransactWriteItems,
// and [Table], versioned typed items in an application's own tables: the
// Go equivalent of the Java enhanced client's VersionedRecordExtension.
//
// DynamoDB has no locks: a conditional write is the only safe way to
// update an item. Every write here is one, conditional on the version the
// writer read:
//
//	store, err := dynamocas.New(dynamodb.NewFromConfig(awsCfg), dynamocas.Config{Table: "myapp-cas"})
//	err = store.CreateTable(ctx) // once: partition key "pk", on-demand billing
//	counters := cas.NewTyped(store, cas.JSON[int]())
//	n, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
//		return n + 1, nil
//	}, occ.WithRetryable(dynamocas.Retryable))
//
// # Table layout
//
// One item per key, in a table whose partition key is a string attribute
// (Config.KeyAttribute). Every attribute name is configurable, and all of
// them go into expressions through ExpressionAttributeNames, so reserved
// words and any characters are fine:
//
//	pk       S  the key
//	version  N  the key's version; on a tombstone, the deleted version negated
//	value    B  the value (an empty value: the empty string); NULL on a tombstone
//	fence    N  the largest fencing token that wrote the key (fenced writes only)
//	writeid  B  the 16-byte id of the last write
//
// # Versions
//
// A live key's version starts at 1 and grows by 1 with every write. A
// delete does not remove the item: it leaves a tombstone that keeps the
// deleted version (as -version) and the fence, so a key deleted and
// created again gets a version above every version it had (no ABA), and a
// stale fencing token stays stale across the delete. Tombstones cost one
// small item per deleted key; they are never removed.
//
// # Requests
//
// CompareAndSwap is one UpdateItem, SET value, version and write id IF
// version = :expected (a create: IF attribute_not_exists(version) OR
// version < 0), with ReturnValuesOnConditionCheckFailure ALL_OLD, so a
// conflict carries the current item. Servers that ignore that option
// (dynalite) return nothing with the refusal; the store then reads the key
// with a consistent GetItem. Get is a consistent GetItem.
// CompareAndSwapFenced adds (attribute_not_exists(fence) OR fence <= :token)
// to the same condition and sets the fence in the same update; the stored
// item tells a stale token (*cas.FencedError, checked first) from a version
// conflict. Commit is one TransactWriteItems: a ConditionCheck per
// cas.OpCheck, a conditional Update per put and delete; see
// [Store.Commit].
//
// # Limits
//
// DynamoDB refuses items over 400 KB (attribute names included) and
// transactions over 100 actions or 4 MB. [Store.Limits] reports what the
// store derives from them: keys up to 1024 bytes, values up to 400 KB
// less the other attributes, commits of at most 100 operations and 4 MB
// less their attributes. Config.Limits (a cas.Limits, as in every
// adapter) lowers any of them, or raises the key limit up to DynamoDB's
// 2048 bytes; New refuses a limit above DynamoDB's. Larger input fails
// with cas.ErrTooLarge before anything is sent.
//
// # Errors
//
// A refused condition is a *cas.ConflictError (ConditionalCheckFailed, in
// a single write or as a transaction's cancellation reason) naming the key,
// with the current item. Throttling, TransactionConflict, server errors, a
// read whose answer was lost or cut, and a refusal (HTTP 4xx) whose body
// was cut are reported for occ by [Retryable]; a cut refusal of a write
// whose key no longer matches its condition is the conflict. A write whose
// answer was lost, or whose HTTP 200 answer was cut, is resolved by reading
// its write id back: found, it applied; the key unchanged, it is sent
// again (at most one of the two sends can apply); otherwise the caller
// gets a *cas.AmbiguousError with the key and the write id. Native SDK
// errors
// (*types.ConditionalCheckFailedException,
// *types.TransactionCanceledException, ...) stay reachable with errors.As.
//
// The store sends each conditional write once (the SDK's retryer is off
// for them): a resend by the SDK that its condition refuses cannot tell
// "my first attempt applied" from "someone else wrote".
//
// # Concurrency
//
// Store, Table and Tx are safe for concurrent use.
package dynamocas
