package occhttp

import "net/http"

// RequirePreconditions wraps next so that a PUT, PATCH or DELETE without
// If-Match or If-None-Match is answered 428 Precondition Required, and one
// with a malformed precondition 400, before next runs. Other methods (GET,
// and POST for actions and creations under a new key) pass through. Use
// it in front of handlers that write with AllowUnconditional, or to refuse
// blind writes for a whole tree of routes at once.
func RequirePreconditions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut, http.MethodPatch, http.MethodDelete:
			p, err := ReadPrecondition(r)
			if err == nil && p.Kind == Unconditional {
				err = required(r.URL.Path)
			}
			if err != nil {
				WriteError(w, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
