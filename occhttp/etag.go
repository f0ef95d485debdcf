package occhttp

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/occkit/occkit/cas"
)

// ETag returns the strong entity tag of version v: its decimal digits in
// double quotes, such as `"7"`. Version 0 (no resource) has no tag and
// gives "".
func ETag(v cas.Version) string {
	if v == 0 {
		return ""
	}
	return `"` + strconv.FormatUint(uint64(v), 10) + `"`
}

// ParseETag returns the version a strong entity tag made by ETag names. A
// weak tag (W/"7"), a tag this package did not make, or a malformed one
// fails with an error matching ErrBadPrecondition.
func ParseETag(tag string) (cas.Version, error) {
	t, err := parseTag(tag)
	if err != nil {
		return 0, err
	}
	if t.weak {
		return 0, fmt.Errorf("%w: weak entity tag %s names no version", ErrBadPrecondition, tag)
	}
	if t.version == 0 {
		return 0, fmt.Errorf("%w: entity tag %s names no version", ErrBadPrecondition, tag)
	}
	return t.version, nil
}

// SetETag sets the response's ETag header to v's tag (and removes it for
// version 0). Call it before WriteHeader.
func SetETag(w http.ResponseWriter, v cas.Version) {
	if v == 0 {
		w.Header().Del("ETag")
		return
	}
	w.Header().Set("ETag", ETag(v))
}

// NotModified evaluates the preconditions of a GET or HEAD of the
// resource at version v, in the order of RFC 9110 13.2.2, answers the
// request when one decides it, and reports whether it did; the handler
// then writes nothing more:
//   - an If-Match that does not name v is answered 412 Precondition
//     Failed with v's ETag (strong comparison, as for writes: a weak tag
//     never matches; * matches any version), and a malformed one 400;
//   - then an If-None-Match that names v (or is *) is answered 304 Not
//     Modified with v's ETag. Comparison is weak, as RFC 9110 says for
//     If-None-Match; a malformed If-None-Match is ignored (the full
//     response is sent).
//
// Other methods, and v 0, are left to the handler: a missing resource is
// answered 404 whatever its preconditions (RFC 9110 13.2.1).
func NotModified(w http.ResponseWriter, r *http.Request, v cas.Version) bool {
	if v == 0 || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	// If-Match binds reads too (RFC 9110 13.1.1): a client that asks for
	// the version it holds, e.g. to resume a download, must not get
	// another one, nor a 304 that would confirm a copy it does not have.
	if vals := r.Header.Values("If-Match"); len(vals) > 0 {
		p, err := readIfMatch(vals)
		if err == nil && !p.matches(v) {
			err = &PreconditionError{Key: r.URL.Path, Precondition: p, Current: v}
		}
		if err != nil {
			WriteError(w, err)
			return true
		}
	}
	vals := r.Header.Values("If-None-Match")
	if len(vals) == 0 {
		return false
	}
	l, err := parseList(vals)
	if err != nil {
		return false
	}
	if !l.any && !l.has(v, false) {
		return false
	}
	SetETag(w, v)
	w.WriteHeader(http.StatusNotModified)
	return true
}

// tag is one parsed entity tag. version is 0 for a tag this package did
// not make (it matches no version).
type tag struct {
	weak    bool
	version cas.Version
}

// parseTag parses one entity-tag (RFC 9110 8.8.3): [W/] DQUOTE *etagc DQUOTE.
func parseTag(s string) (tag, error) {
	var t tag
	raw := s
	if strings.HasPrefix(s, "W/") {
		t.weak, s = true, s[2:]
	}
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return t, fmt.Errorf("%w: malformed entity tag %q", ErrBadPrecondition, raw)
	}
	body := s[1 : len(s)-1]
	for i := 0; i < len(body); i++ {
		if c := body[i]; c == '"' || c < 0x21 || c == 0x7f {
			return t, fmt.Errorf("%w: malformed entity tag %q", ErrBadPrecondition, raw)
		}
	}
	if n, err := strconv.ParseUint(body, 10, 64); err == nil && body != "" && body[0] != '0' && body[0] != '+' {
		t.version = cas.Version(n)
	}
	return t, nil
}

// tagList is the value of an If-Match or If-None-Match header: * or a list
// of entity tags.
type tagList struct {
	any  bool
	tags []tag
}

// has reports whether the list names v: strong comparison skips weak tags.
func (l tagList) has(v cas.Version, strong bool) bool {
	for _, t := range l.tags {
		if t.version == v && v != 0 && !(strong && t.weak) {
			return true
		}
	}
	return false
}

// parseList parses the header's field lines (several lines are one
// comma-separated list). An entity tag may itself contain commas, so the
// list is scanned quote by quote rather than split.
func parseList(vals []string) (tagList, error) {
	var l tagList
	s := strings.Join(vals, ",")
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			break
		}
		if s[0] == '*' {
			l.any = true
			s = s[1:]
		} else {
			start := 0
			if strings.HasPrefix(s, "W/") {
				start = 2
			}
			if len(s) <= start || s[start] != '"' {
				return l, fmt.Errorf("%w: malformed entity tag list %q", ErrBadPrecondition, strings.Join(vals, ", "))
			}
			end := strings.IndexByte(s[start+1:], '"')
			if end < 0 {
				return l, fmt.Errorf("%w: unterminated entity tag in %q", ErrBadPrecondition, strings.Join(vals, ", "))
			}
			end += start + 2
			t, err := parseTag(s[:end])
			if err != nil {
				return l, err
			}
			l.tags = append(l.tags, t)
			s = s[end:]
		}
		s = strings.TrimLeft(s, " \t")
		if s != "" && s[0] != ',' {
			return l, fmt.Errorf("%w: malformed entity tag list %q", ErrBadPrecondition, strings.Join(vals, ", "))
		}
	}
	if l.any && len(l.tags) > 0 {
		return l, fmt.Errorf("%w: * mixed with entity tags", ErrBadPrecondition)
	}
	if !l.any && len(l.tags) == 0 {
		return l, fmt.Errorf("%w: empty entity tag list", ErrBadPrecondition)
	}
	return l, nil
}
