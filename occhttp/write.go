package occhttp

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Option configures one call of Put, Update, Delete, UpdateRow or
// DeleteRow, or the writes of a RowHandler.
type Option struct {
	unconditional bool
	retry         []occ.Option
}

// AllowUnconditional lets a write without If-Match or If-None-Match
// through instead of refusing it with ErrPreconditionRequired (428). The
// write is then a read-modify-write retried on the server (occ.Update, or
// the table's Modify): it loses nothing inside itself, but it overwrites
// edits the client has not seen. Use it for clients that cannot send
// preconditions.
func AllowUnconditional() Option { return Option{unconditional: true} }

// WithRetry passes options to the server-side retry loop of unconditional
// and If-Match: * writes (attempt limit, backoff, budget, observer). Writes
// with If-Match naming versions or If-None-Match: * are never retried: a
// conflict there is the client's to resolve.
func WithRetry(opts ...occ.Option) Option { return Option{retry: opts} }

type config struct {
	unconditional bool
	retry         []occ.Option
}

func (c *config) apply(opts []Option) {
	for _, o := range opts {
		c.unconditional = c.unconditional || o.unconditional
		c.retry = append(c.retry, o.retry...)
	}
}

// required returns the error of a write without a precondition.
func required(key string) error {
	return fmt.Errorf("%w: write to %q needs If-Match (or If-None-Match: * to create)", ErrPreconditionRequired, key)
}

// Update edits the resource at key under precondition p, read from the
// request with ReadPrecondition. edit gets the current value (exists is
// false, cur the zero value, when the resource does not exist, which only
// CreateOnly and allowed unconditional writes let through) and returns the
// value to write. Update returns the value written and its version, the
// new ETag.
//
//   - MatchVersion: the resource is read; if its version is not one that
//     If-Match names, or it changes before the write, Update fails with a
//     *PreconditionError carrying the current version (412). edit runs at
//     most once.
//   - CreateOnly: edit runs once on the zero value and the write expects
//     version 0; an existing resource fails with a *PreconditionError.
//   - MatchAny: occ.Update, with conflicts retried on the server; a missing
//     resource fails with a *PreconditionError.
//   - Unconditional: ErrPreconditionRequired (428), unless
//     AllowUnconditional is given: then occ.Update.
//
// An error from edit is returned as is (answer it with WriteError or your
// own status). A PATCH handler:
//
//	p, err := occhttp.ReadPrecondition(r)
//	if err != nil {
//		occhttp.WriteError(w, err)
//		return
//	}
//	item, v, err := occhttp.Update(r.Context(), items, key, p, func(cur Item, exists bool) (Item, error) {
//		cur.Name = patch.Name
//		return cur, nil
//	})
//	if err != nil {
//		occhttp.WriteError(w, err) // 412 with the current ETag if someone edited first
//		return
//	}
//	occhttp.SetETag(w, v)
//	json.NewEncoder(w).Encode(item)
func Update[T any](ctx context.Context, s *cas.Typed[T], key string, p Precondition, edit func(cur T, exists bool) (T, error), opts ...Option) (T, cas.Version, error) {
	var c config
	c.apply(opts)
	var zero T
	switch p.Kind {
	case Unconditional:
		if !c.unconditional {
			return zero, 0, required(key)
		}
		return occ.Update(ctx, s, key, edit, c.retry...)
	case MatchAny:
		return occ.Update(ctx, s, key, func(cur T, exists bool) (T, error) {
			if !exists {
				return cur, occ.Permanent(&PreconditionError{Key: key, Precondition: p})
			}
			return edit(cur, true)
		}, c.retry...)
	case CreateOnly:
		next, err := edit(zero, false)
		if err != nil {
			return zero, 0, err
		}
		v, err := s.CompareAndSwap(ctx, key, 0, next)
		if err != nil {
			return zero, 0, preconditionFailed(ctx, storeVersion(s.Store(), key), key, p, err)
		}
		return next, v, nil
	case MatchVersion:
		cur, ver, err := s.Get(ctx, key)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return zero, 0, &PreconditionError{Key: key, Precondition: p}
		case err != nil:
			return zero, 0, err
		case !p.matches(ver):
			return zero, 0, &PreconditionError{Key: key, Precondition: p, Current: ver}
		}
		next, err := edit(cur, true)
		if err != nil {
			return zero, 0, err
		}
		v, err := s.CompareAndSwap(ctx, key, ver, next)
		if err != nil {
			return zero, 0, preconditionFailed(ctx, storeVersion(s.Store(), key), key, p, err)
		}
		return next, v, nil
	}
	return zero, 0, fmt.Errorf("%w: unknown precondition kind %d", ErrBadPrecondition, p.Kind)
}

// Put replaces the resource at key with v under precondition p and returns
// the new version (the new ETag) and whether the write created the
// resource (answer 201 Created then, 200 otherwise). With If-Match naming
// one version it is a single conditional write, no read; the other kinds
// behave as in Update.
func Put[T any](ctx context.Context, s *cas.Typed[T], key string, p Precondition, v T, opts ...Option) (version cas.Version, created bool, err error) {
	if p.Kind == MatchVersion && len(p.Versions) == 1 {
		nv, err := s.CompareAndSwap(ctx, key, p.Versions[0], v)
		if err != nil {
			return 0, false, preconditionFailed(ctx, storeVersion(s.Store(), key), key, p, err)
		}
		return nv, false, nil
	}
	_, nv, err := Update(ctx, s, key, p, func(_ T, exists bool) (T, error) {
		created = !exists
		return v, nil
	}, opts...)
	if err != nil {
		return 0, false, err
	}
	return nv, created, nil
}

// Delete deletes the resource at key under precondition p:
//   - MatchVersion: only if it is at a version If-Match names, else a
//     *PreconditionError with the current version (412);
//   - MatchAny: if it exists (retried on the server), else a
//     *PreconditionError (412);
//   - Unconditional: ErrPreconditionRequired (428) unless AllowUnconditional
//     is given; then an error matching cas.ErrNotFound (404) when it does
//     not exist;
//   - CreateOnly makes no sense for a delete and fails with
//     ErrBadPrecondition (400).
func Delete(ctx context.Context, s cas.Store, key string, p Precondition, opts ...Option) error {
	return deleteUnder(ctx, key, p, opts, storeVersion(s, key), func(ctx context.Context, expected cas.Version) error {
		return s.CompareAndDelete(ctx, key, expected)
	})
}

// versionReader reads a resource's current version; a resource that does
// not exist is an error matching cas.ErrNotFound.
type versionReader func(ctx context.Context) (cas.Version, error)

// storeVersion is the versionReader of key in s.
func storeVersion(s cas.Store, key string) versionReader {
	return func(ctx context.Context) (cas.Version, error) {
		it, err := s.Get(ctx, key)
		return it.Version, err
	}
}

// deleteUnder is Delete and DeleteRow: read gives the resource's version
// and del deletes it if it is at expected (a conflict otherwise).
func deleteUnder(ctx context.Context, key string, p Precondition, opts []Option, read versionReader, del func(ctx context.Context, expected cas.Version) error) error {
	var c config
	c.apply(opts)
	switch p.Kind {
	case CreateOnly:
		return fmt.Errorf("%w: If-None-Match: * on a delete", ErrBadPrecondition)
	case Unconditional, MatchAny:
		if p.Kind == Unconditional && !c.unconditional {
			return required(key)
		}
		return occ.Retry(ctx, func(ctx context.Context) error {
			v, err := read(ctx)
			switch {
			case errors.Is(err, cas.ErrNotFound) && p.Kind == MatchAny:
				return occ.Permanent(&PreconditionError{Key: key, Precondition: p})
			case err != nil:
				return err
			}
			return del(ctx, v)
		}, c.retry...)
	case MatchVersion:
		expected := cas.Version(0)
		if len(p.Versions) == 1 {
			expected = p.Versions[0]
		} else {
			v, err := read(ctx)
			switch {
			case errors.Is(err, cas.ErrNotFound):
				return &PreconditionError{Key: key, Precondition: p}
			case err != nil:
				return err
			case !p.matches(v):
				return &PreconditionError{Key: key, Precondition: p, Current: v}
			}
			expected = v
		}
		if expected == 0 { // If-Match of only weak or foreign tags: matches nothing
			v, err := read(ctx)
			if err != nil && !errors.Is(err, cas.ErrNotFound) {
				return err
			}
			return &PreconditionError{Key: key, Precondition: p, Current: v}
		}
		if err := del(ctx, expected); err != nil {
			return preconditionFailed(ctx, read, key, p, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown precondition kind %d", ErrBadPrecondition, p.Kind)
}
