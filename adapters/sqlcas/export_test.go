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

// SwapStatement returns the SQL text of the store's compare-and-swap and
// a function building its arguments, so that a benchmark can send the very
// same statement by hand.
func (s *Store) SwapStatement() (string, func(key string, value, id []byte, expected int64) []any) {
	st := s.st.swap
	return st.text, func(key string, value, id []byte, expected int64) []any {
		vals := [numSlots]any{key, value, id, expected, int64(0)}
		return st.args(&vals)
	}
}

// OpenPrepared returns how many statements stores and tables have
// prepared and not closed yet, and how many they ever prepared.
func OpenPrepared() (open, total int64) { return openPrepared.Load(), preparedTotal.Load() }

// RunsBlocks reports whether the store has run a compound statement
// (MariaDB's BEGIN NOT ATOMIC: an exclusive commit's write and COMMIT).
func (s *Store) RunsBlocks() bool { return s.blocks.Load() == blocksRun }

// RunsStrict reports whether the store's commits have run as one strict
// UPDATE (MariaDB's SET STATEMENT).
func (s *Store) RunsStrict() bool { return s.strict.Load() == blocksRun }

// RunsBlocks reports whether the table's Txn commits have run as one
// compound statement.
func (t *Table[T]) RunsBlocks() bool { return t.blocks.Load() == blocksRun }

// ExclusiveBlocks is how many exclusive updates have committed in one
// compound statement with their write (MariaDB).
func ExclusiveBlocks() int64 { return exclusiveBlocks.Load() }
