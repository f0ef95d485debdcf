package versionvector

import (
	"context"
	"fmt"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Register is a multi-writer register over any [cas.Store]: each key holds a
// [Set] of values of type T, encoded with [SetCodec]. Writers in several
// regions (each with its own store, synchronised by [Sync]) or several
// writers of one store that do not read before writing never overwrite each
// other blindly: a write replaces exactly what its writer read, and writes
// made without seeing each other are kept side by side as siblings until a
// later write (or a [Resolver]) collapses them.
//
// A Register is safe for concurrent use if its store and codec are.
type Register[T any] struct {
	typed        *cas.Typed[Set[T]]
	readResolve  Resolver[T]
	writeResolve Resolver[T]
}

// RegisterOption configures a Register. Options are plain values: build
// them once and share them between goroutines and registers.
type RegisterOption[T any] struct {
	onRead, onWrite Resolver[T]
}

// ResolveOnRead makes Get collapse siblings with r: it returns one value and
// a context covering every sibling, so that writing the value back replaces
// them all. The store keeps the siblings until then.
func ResolveOnRead[T any](r Resolver[T]) RegisterOption[T] {
	return RegisterOption[T]{onRead: r}
}

// ResolveOnWrite makes Put collapse siblings with r: when a write would
// leave siblings beside the new value, it stores r's result of them all
// (the new value last) instead, so the key holds one value after each Put.
// Siblings can still appear when Sync brings in writes from another store,
// until the next Put.
func ResolveOnWrite[T any](r Resolver[T]) RegisterOption[T] {
	return RegisterOption[T]{onWrite: r}
}

// NewRegister returns a register of values of type T, encoded with c, kept
// in s. Without options, Get returns every sibling.
func NewRegister[T any](s cas.Store, c cas.Codec[T], opts ...RegisterOption[T]) *Register[T] {
	r := &Register[T]{typed: cas.NewTyped(s, SetCodec(c))}
	for _, o := range opts {
		if o.onRead != nil {
			r.readResolve = o.onRead
		}
		if o.onWrite != nil {
			r.writeResolve = o.onWrite
		}
	}
	return r
}

// Store returns the underlying store.
func (r *Register[T]) Store() cas.Store { return r.typed.Store() }

// Get returns the key's siblings (one value, unless writes were concurrent)
// and the causal context to hand back to Put. A key never written fails with
// an error matching cas.ErrNotFound, with no values and the zero context,
// which is the right context for creating the key.
func (r *Register[T]) Get(ctx context.Context, key string) ([]T, CausalContext, error) {
	s, _, err := r.typed.Get(ctx, key)
	if err != nil {
		return nil, CausalContext{}, err
	}
	vals := s.Values()
	if len(vals) > 1 && r.readResolve != nil {
		vals = []T{r.readResolve(vals)}
	}
	return vals, CausalContext{vv: s.Join()}, nil
}

// GetSet returns the key's whole set, unresolved, and its version in the
// store. A key never written fails with an error matching cas.ErrNotFound.
func (r *Register[T]) GetSet(ctx context.Context, key string) (Set[T], cas.Version, error) {
	return r.typed.Get(ctx, key)
}

// Put writes v to key at replica, by a writer that read cc (the zero
// context if it read nothing): the siblings cc covers are replaced by v, the
// others stay as v's siblings. The write is a compare-and-swap retried with
// occ.Update (opts are its options), so concurrent Puts to one store never
// lose each other.
//
// replica names the store being written, not the client: every Put with a
// given replica ID must go to the same store (use one ID per region), and
// it must be non-empty UTF-8 (else ErrInvalidReplicaID). A context forged
// with a counter of 2⁶⁴−1 fails with ErrCounterOverflow.
//
// Put returns no context: the writer has not seen the siblings its write
// joined. Read again before the next write:
//
//	vals, cc, err := carts.Get(ctx, "cart/ada")
//	if err != nil && !errors.Is(err, cas.ErrNotFound) {
//		return err
//	}
//	cart := union(vals...) // no values for a new cart; siblings to merge
//	cart.Items = append(cart.Items, "pen")
//	err = carts.Put(ctx, "cart/ada", cc, cart, "eu") // replaces vals only
//
// A resolver given with ResolveOnWrite runs inside the retry loop and may
// run more than once per Put.
func (r *Register[T]) Put(ctx context.Context, key string, cc CausalContext, v T, replica string, opts ...occ.Option) error {
	if !validID(replica) {
		return invalidID(replica)
	}
	_, _, err := occ.Update(ctx, r.typed, key, func(cur Set[T], _ bool) (Set[T], error) {
		if _, ok := cur.nextCounter(cc.vv, replica); !ok {
			return Set[T]{}, fmt.Errorf("%w: replica %q of key %q", ErrCounterOverflow, replica, key)
		}
		if r.writeResolve != nil {
			if kept := cur.Discard(cc.vv); kept.Len() > 0 {
				resolved := r.writeResolve(append(kept.Values(), v))
				return cur.Update(Merge(cur.Join(), cc.vv), replica, resolved), nil
			}
		}
		return cur.Update(cc.vv, replica, v), nil
	}, opts...)
	return err
}
