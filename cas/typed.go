package cas

import (
	"context"
	"errors"
	"fmt"
)

// Typed is a Store of values of type T, encoded with a Codec. It is safe for
// concurrent use if its Store and Codec are.
type Typed[T any] struct {
	store Store
	codec Codec[T]
}

// NewTyped returns a typed view of s that encodes values with c.
func NewTyped[T any](s Store, c Codec[T]) *Typed[T] {
	return &Typed[T]{store: s, codec: c}
}

// Store returns the underlying Store.
func (t *Typed[T]) Store() Store { return t.store }

// Codec returns the codec.
func (t *Typed[T]) Codec() Codec[T] { return t.codec }

// Get returns the key's decoded value and version. A missing key fails with
// an error matching ErrNotFound and returns T's zero value.
func (t *Typed[T]) Get(ctx context.Context, key string) (T, Version, error) {
	var v T
	it, err := t.store.Get(ctx, key)
	if err != nil {
		return v, 0, err
	}
	if err := t.Decode(key, it.Value, &v); err != nil {
		return v, 0, err
	}
	return v, it.Version, nil
}

// CompareAndSwap encodes v and writes it if the key is at version expected
// (0: absent). It returns the new version.
func (t *Typed[T]) CompareAndSwap(ctx context.Context, key string, expected Version, v T) (Version, error) {
	b, err := t.Encode(key, v)
	if err != nil {
		return 0, err
	}
	return t.store.CompareAndSwap(ctx, key, expected, b)
}

// CompareAndDelete deletes the key if it is at version expected.
func (t *Typed[T]) CompareAndDelete(ctx context.Context, key string, expected Version) error {
	return t.store.CompareAndDelete(ctx, key, expected)
}

// Encode marshals v, wrapping a failure in a *CodecError.
func (t *Typed[T]) Encode(key string, v T) ([]byte, error) {
	b, err := t.codec.Marshal(v)
	if err != nil {
		return nil, &CodecError{Key: key, Err: err}
	}
	return b, nil
}

// Decode unmarshals data into v, wrapping a failure in a *CodecError.
func (t *Typed[T]) Decode(key string, data []byte, v *T) error {
	if err := t.codec.Unmarshal(data, v); err != nil {
		return &CodecError{Key: key, Decode: true, Err: err}
	}
	return nil
}

// AsFenced returns the underlying store as a FencedStore, or an error
// matching errors.ErrUnsupported when it cannot check fencing tokens.
func AsFenced(s Store) (FencedStore, error) {
	if f, ok := s.(FencedStore); ok {
		return f, nil
	}
	return nil, unsupported("fenced writes", s)
}

// AsCommitter returns s as a Committer, or an error matching
// errors.ErrUnsupported when it cannot commit several keys atomically.
func AsCommitter(s Store) (Committer, error) {
	if c, ok := s.(Committer); ok {
		return c, nil
	}
	return nil, unsupported("multi-key commits", s)
}

type unsupportedError struct {
	what  string
	store string
}

func (e *unsupportedError) Error() string {
	return "cas: " + e.store + " does not support " + e.what
}

func (e *unsupportedError) Unwrap() error { return errors.ErrUnsupported }

func unsupported(what string, s Store) error {
	return &unsupportedError{what: what, store: storeName(s)}
}

func storeName(s Store) string { return fmt.Sprintf("%T", s) }
