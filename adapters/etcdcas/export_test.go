package etcdcas

// Test hooks: exported to the package's own tests only.

// Prefix returns the store's prefix (Config.Prefix).
func (s *Store) Prefix() string { return s.data[:len(s.data)-2] }

// DataKey returns the etcd key that holds key's value: Prefix + "d/" + key.
// Its value is an envelope (a format byte, the 16-byte id of the write that
// stored it, then the value).
func (s *Store) DataKey(key string) string { return s.dataKey(key) }
