package rediscas

// Test hooks: exported to the package's own tests only.

// Prefix returns the store's prefix (Config.Prefix).
func (s *Store) Prefix() string { return s.data[:len(s.data)-2] }

// DataKey returns the Redis key of the hash that holds key: Prefix + "d:" +
// key.
func (s *Store) DataKey(key string) string { return s.dataKey(key) }

// CounterKey returns the Redis key of the store's version counter: Prefix +
// "version".
func (s *Store) CounterKey() string { return s.counter }

// DeltaRecords returns the pattern (KEYS, SCAN MATCH) of the store's
// delta records: Prefix + "a:*", the prefix's glob characters escaped.
func (s *Store) DeltaRecords() string {
	var b []byte
	for i := 0; i < len(s.deltas); i++ {
		if c := s.deltas[i]; c == '*' || c == '?' || c == '[' || c == ']' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s.deltas[i])
	}
	return string(b) + "*"
}

// LockKey returns the Redis key of key's lock: Prefix + "{" + key + "}".
func (l *Locker) LockKey(key string) string { return l.lockKey(key) }

// HashSlot returns the Redis Cluster hash slot of a Redis key.
var HashSlot = hashSlot
