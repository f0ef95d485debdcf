package sqlcas

// SetBeforeCommitHook makes f run just before the store sends the COMMIT
// of a transaction of its own (MySQL, PostgreSQL), and returns the
// function that removes it.
func SetBeforeCommitHook(f func()) (restore func()) {
	beforeCommit.Store(&f)
	return func() { beforeCommit.Store(nil) }
}

// CallersTx reports whether With treats q as the caller's transaction.
func CallersTx(q Querier) bool { return callersTx(q) }
