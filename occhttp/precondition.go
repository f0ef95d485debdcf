package occhttp

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/occkit/occkit/cas"
)

// Kind is the kind of a request's precondition.
type Kind uint8

// The kinds of preconditions a write can carry.
const (
	// Unconditional: neither If-Match nor If-None-Match.
	Unconditional Kind = iota
	// MatchVersion: If-Match with entity tags; the write applies only if
	// the resource is at one of Precondition.Versions.
	MatchVersion
	// MatchAny: If-Match: *; the write applies only if the resource exists.
	MatchAny
	// CreateOnly: If-None-Match: *; the write applies only if the resource
	// does not exist.
	CreateOnly
)

// Precondition is what a write request's If-Match or If-None-Match asks
// for. The zero value is Unconditional.
type Precondition struct {
	// Kind says which precondition the request carries.
	Kind Kind
	// Versions are the versions If-Match names (MatchVersion only). Weak
	// tags and tags this package did not make are left out: strong
	// comparison never matches them, so an If-Match of only such tags
	// always fails.
	Versions []cas.Version
}

// IfMatch returns the precondition of an If-Match naming v.
func IfMatch(v cas.Version) Precondition {
	return Precondition{Kind: MatchVersion, Versions: []cas.Version{v}}
}

// String returns the precondition as the header that carries it.
func (p Precondition) String() string {
	switch p.Kind {
	case MatchVersion:
		tags := make([]string, len(p.Versions))
		for i, v := range p.Versions {
			tags[i] = ETag(v)
		}
		return "If-Match: " + strings.Join(tags, ", ")
	case MatchAny:
		return "If-Match: *"
	case CreateOnly:
		return "If-None-Match: *"
	}
	return "none"
}

// matches reports whether version v (0: absent) satisfies p.
func (p Precondition) matches(v cas.Version) bool {
	switch p.Kind {
	case MatchVersion:
		for _, w := range p.Versions {
			if w == v && v != 0 {
				return true
			}
		}
		return false
	case MatchAny:
		return v != 0
	case CreateOnly:
		return v == 0
	}
	return true
}

// ReadPrecondition reads a write request's If-Match and If-None-Match. A
// malformed header fails with an error matching ErrBadPrecondition, and so
// do combinations that a single conditional write cannot express: both
// headers at once, or If-None-Match with entity tags (that form is for
// GET; see NotModified).
func ReadPrecondition(r *http.Request) (Precondition, error) {
	im, inm := r.Header.Values("If-Match"), r.Header.Values("If-None-Match")
	switch {
	case len(im) > 0 && len(inm) > 0:
		return Precondition{}, fmt.Errorf("%w: both If-Match and If-None-Match", ErrBadPrecondition)
	case len(im) > 0:
		return readIfMatch(im)
	case len(inm) > 0:
		l, err := parseList(inm)
		if err != nil {
			return Precondition{}, err
		}
		if !l.any {
			return Precondition{}, fmt.Errorf("%w: If-None-Match on a write must be *", ErrBadPrecondition)
		}
		return Precondition{Kind: CreateOnly}, nil
	}
	return Precondition{}, nil
}

// readIfMatch reads the field lines of an If-Match header, for a write
// (ReadPrecondition) or a read (NotModified) alike.
func readIfMatch(vals []string) (Precondition, error) {
	l, err := parseList(vals)
	if err != nil {
		return Precondition{}, err
	}
	if l.any {
		return Precondition{Kind: MatchAny}, nil
	}
	p := Precondition{Kind: MatchVersion}
	for _, t := range l.tags {
		if !t.weak && t.version != 0 {
			p.Versions = append(p.Versions, t.version)
		}
	}
	return p, nil
}
