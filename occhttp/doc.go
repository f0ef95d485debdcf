// Package occhttp carries occkit's versions over HTTP: a key's
// [cas.Version] is the resource's strong entity tag, a client that edits
// sends it back in If-Match, and a write whose version moved on meanwhile
// is answered 412 Precondition Failed with the current ETag instead of
// overwriting an edit the client never saw.
//
// This is optimistic locking across a user's think time (a GET, minutes of
// editing, a PUT), which no lock can cover: Rails keeps lock_version in a
// hidden field, Kubernetes sends resourceVersion; HTTP has it built in.
//
// # Entity tags
//
// [ETag] turns a version into a strong tag (`"7"`), [ParseETag] turns it
// back; [SetETag] puts it on a response, [NotModified] answers a GET whose
// If-Match does not name the current version with 412, and one whose
// If-None-Match names it with 304.
//
// # Conditional writes
//
// [ReadPrecondition] reads If-Match and If-None-Match into a
// [Precondition]; [Put], [Update] and [Delete] write under it:
//   - If-Match: "7" writes only if the version is still 7 (one conditional
//     write; no lock is held while the user edits);
//   - If-Match: * writes only if the resource exists (any version);
//   - If-None-Match: * creates only (the write expects version 0);
//   - no precondition at all is refused with 428 Precondition Required
//     unless [AllowUnconditional] is given, when the write retries its
//     conflicts on the server (last writer wins, but nothing is lost
//     inside one read-modify-write).
//
// [RequirePreconditions] is the same refusal as middleware, for a whole
// tree of routes.
//
// # Repository tables
//
// The repository tables (pgcas.Table, sqlcas.Table, dynamocas.Table) are
// [Rows] as they are, and a row's version field is its ETag.
// [RowHandler] serves a table's rows as JSON resources with no code of
// the caller's own: GET with the ETag, 412 and 304, PUT, PATCH and DELETE
// under the request's precondition, answered as below. [UpdateRow] and
// [DeleteRow] are [Update] and [Delete] for handlers of your own: the
// precondition is checked in the table's Modify on the row as stored, so
// a write whose If-Match no longer holds writes nothing and reports the
// current version.
//
// # Statuses
//
// [WriteError] answers an error with its status (see [Status]): 400 for a
// malformed precondition or key, 404 for a missing resource, 409 for a
// conflict the server could not resolve by retrying, 412 with the current
// ETag for a precondition that failed, 413 for a value or a request body
// too large (an [http.MaxBytesError]), 428 for a missing precondition, 500
// for the rest.
//
// Every function here is safe for concurrent use.
package occhttp
