package rediscas

// Test hooks: exported to the package's own tests only.

// DataKey returns the Redis key of the hash that holds key: Prefix + "d:" +
// key.
func (s *Store) DataKey(key string) string { return s.dataKey(key) }

// CounterKey returns the Redis key of the store's version counter: Prefix +
// "version".
func (s *Store) CounterKey() string { return s.counter }

// LockKey returns the Redis key of key's lock: Prefix + "{" + key + "}".
func (l *Locker) LockKey(key string) string { return l.lockKey(key) }

// HashSlot returns the Redis Cluster hash slot of a Redis key.
var HashSlot = hashSlot
