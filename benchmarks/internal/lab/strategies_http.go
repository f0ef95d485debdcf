package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
	"github.com/occkit/occkit/occhttp"
)

// The HTTP strategies: the cell's workers are clients of an HTTP service
// over loopback, one server per process (a --procs run is a service with
// that many replicas over one database), as a repository's callers reach
// it in production.
//
//   - occ-http: the REST way. The service is occhttp.RowHandler over the
//     cell's table; a client GETs the row and its ETag, applies the
//     operation and PUTs the row with If-Match. A 412 is a conflict: the
//     client reads again, under occ.Retry with the lab's options.
//   - occ-http-modify: the client POSTs the operation; the handler runs it
//     in Table.Modify with a combiner and the table's cache (the server
//     side of occ-table-combine).
//   - lock-http: the client POSTs the operation; the handler runs it under
//     SELECT ... FOR UPDATE (lock-pg-for-update, lock-mysql-for-update),
//     the lock such a service takes today.
var httpStrategies = []strategySpec{
	{
		Name:      "occ-http",
		Kind:      kindOptimistic,
		About:     "clients over loopback HTTP: GET the row from occhttp.RowHandler over the cell's Table[T], change it, PUT it with If-Match; a 412 is retried by the client (occ.Retry, the lab's options)",
		SingleKey: true,
		HTTP:      true,
		OwnTable:  true,
		DefaultOn: httpDefault,
		New:       newOCCHTTP,
	},
	{
		Name:      "occ-http-modify",
		Kind:      kindOptimistic,
		About:     "clients over loopback HTTP POST the operation; the handler runs it in Table[T].Modify with a combiner and the table's cache (occ-table-combine behind a service)",
		SingleKey: true,
		HTTP:      true,
		OwnTable:  true,
		DefaultOn: httpDefault,
		New: func(ctx context.Context, h *harness) (cellStrategy, error) {
			inner, err := newTableStrategy(ctx, h, true)
			if err != nil {
				return nil, err
			}
			return newOpService(h, inner)
		},
	},
	{
		Name:      "lock-http",
		Kind:      kindLock,
		About:     "clients over loopback HTTP POST the operation; the handler runs it under SELECT ... FOR UPDATE (lock-pg-for-update on postgres, lock-mysql-for-update on mysql)",
		SingleKey: true,
		HTTP:      true,
		DefaultOn: httpDefault,
		New: func(ctx context.Context, h *harness) (cellStrategy, error) {
			newLock, ok := forUpdateOf[h.Backend.System]
			if !ok {
				return nil, fmt.Errorf("lock-http's handler locks with SELECT ... FOR UPDATE, which %s has not: %w", h.Backend.System, errNotApplicable)
			}
			inner, err := newLock(ctx, h)
			if err != nil {
				return nil, err
			}
			return newOpService(h, inner)
		},
	},
}

// forUpdateOf is the FOR UPDATE strategy of each backend that has one.
var forUpdateOf = map[string]func(context.Context, *harness) (cellStrategy, error){
	backends.Postgres: newPGForUpdate,
	backends.MySQL:    newMySQLForUpdate,
}

// httpDefault runs the HTTP strategies by default on the servers that
// have both a table and a FOR UPDATE to compare with.
func httpDefault(b string, _ bool) bool { return forUpdateOf[b] != nil }

// httpFront is the part the HTTP strategies share: the process's server
// on a loopback port and its workers' client.
type httpFront struct {
	srv    *http.Server
	base   string
	client *http.Client
	done   chan error
}

// startHTTP serves handler on a free loopback port for workers clients.
func startHTTP(handler http.Handler, workers int) (*httpFront, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	f := &httpFront{
		srv:  &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second},
		base: "http://" + ln.Addr().String(),
		// One kept-alive connection per worker, as a service's clients
		// pool theirs.
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: workers + 4, MaxIdleConnsPerHost: workers + 4}},
		done:   make(chan error, 1),
	}
	go func() { f.done <- f.srv.Serve(ln) }()
	return f, nil
}

// close stops the server and drops the client's connections.
func (f *httpFront) close(ctx context.Context) error {
	f.client.CloseIdleConnections()
	err := f.srv.Shutdown(ctx)
	if serr := <-f.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// The header an operation's handler names the lab's outcome in, for the
// errors that must stay matchable on the client's side.
const outcomeHeader = "X-Lab-Outcome"

// opService is an HTTP service that runs an operation posted to it with
// an inner strategy: POST /op?key=K&arg=N&work=NS&w=W.
type opService struct {
	*httpFront
	inner cellStrategy
}

// newOpService serves inner's operations over loopback HTTP.
func newOpService(h *harness, inner cellStrategy) (cellStrategy, error) {
	s := &opService{inner: inner}
	wl := h.Workload
	mux := http.NewServeMux()
	mux.HandleFunc("POST /op", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		arg, err1 := strconv.ParseInt(q.Get("arg"), 10, 64)
		work, err2 := strconv.ParseInt(q.Get("work"), 10, 64)
		worker, err3 := strconv.Atoi(q.Get("w"))
		if err := errors.Join(err1, err2, err3); err != nil || q.Get("key") == "" || worker < 0 || worker >= h.Cell.Workers {
			http.Error(w, fmt.Sprintf("bad operation %q: %v", r.URL.RawQuery, err), http.StatusBadRequest)
			return
		}
		op := operation{Keys: []string{q.Get("key")}, arg: arg, w: wl, work: time.Duration(work)}
		if err := s.inner.Do(r.Context(), worker, op); err != nil {
			writeOutcome(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	f, err := startHTTP(mux, h.Cell.Workers)
	if err != nil {
		_ = inner.Close(context.Background())
		return nil, err
	}
	s.httpFront = f
	return s, nil
}

// Do posts op to the service.
func (s *opService) Do(ctx context.Context, w int, op operation) error {
	q := url.Values{
		"key":  {op.Keys[0]},
		"arg":  {strconv.FormatInt(op.arg, 10)},
		"work": {strconv.FormatInt(int64(op.work), 10)},
		"w":    {strconv.Itoa(w)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/op?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return readOutcome(resp)
}

// Close stops the service, then the inner strategy.
func (s *opService) Close(ctx context.Context) error {
	return errors.Join(s.close(ctx), s.inner.Close(ctx))
}

// Value implements valueReader for an inner strategy that keeps its data
// in a table of its own.
func (s *opService) Value(ctx context.Context, key string) (int64, error) {
	vr, ok := s.inner.(valueReader)
	if !ok {
		return 0, fmt.Errorf("%T keeps its data in the cell's store", s.inner)
	}
	return vr.Value(ctx, key)
}

// writeOutcome answers an operation that failed with err.
func writeOutcome(w http.ResponseWriter, err error) {
	outcome := ""
	switch {
	case errors.Is(err, errDeclined):
		outcome = "declined"
	case errors.Is(err, errNegative):
		outcome = "negative"
	case errors.Is(err, cas.ErrAmbiguous):
		outcome = "ambiguous"
	case errors.Is(err, occ.ErrAttemptsExhausted):
		outcome = "exhausted"
	}
	w.Header().Set(outcomeHeader, outcome)
	http.Error(w, err.Error(), http.StatusConflict)
}

// readOutcome is the error of an operation's failed response, matchable
// as the handler's was.
func readOutcome(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	switch resp.Header.Get(outcomeHeader) {
	case "declined":
		return errDeclined
	case "negative":
		return errNegative
	case "ambiguous":
		return fmt.Errorf("%s: %w", msg, cas.ErrAmbiguous)
	case "exhausted":
		return fmt.Errorf("%s: %w", msg, occ.ErrAttemptsExhausted)
	}
	return errors.New(msg)
}

// appRows serves a cell's table through occhttp.Rows, keys as strings.
type appRows struct{ t appTable }

func (r appRows) Get(ctx context.Context, key string) (tableRow, error) { return r.t.get(ctx, key) }

func (r appRows) Modify(ctx context.Context, key string, mutate func(tableRow, bool) (tableRow, error), opts ...occ.Option) (tableRow, error) {
	return r.t.modify(ctx, key, mutate, opts...)
}

// Delete is not served: the lab's clients never delete.
func (r appRows) Delete(context.Context, string, cas.Version) error {
	return errors.ErrUnsupported
}

func (appRows) VersionOf(row tableRow) cas.Version { return row.Version }

// restClient is occ-http's: a client of occhttp.RowHandler.
type restClient struct {
	*httpFront
	t    appTable
	opts [][]occ.Option
}

func newOCCHTTP(ctx context.Context, h *harness) (cellStrategy, error) {
	// The table made and seeded as occ-table's (the service's own
	// options are occhttp's: If-Match writes run without turns).
	ts, err := newTableStrategy(ctx, h, false)
	if err != nil {
		return nil, err
	}
	t := ts.(tableStrategy).t
	mux := http.NewServeMux()
	mux.Handle("/rows/{id}", occhttp.RowHandler[string, tableRow](appRows{t}, func(r *http.Request) (string, error) {
		return r.PathValue("id"), nil
	}))
	f, err := startHTTP(mux, h.Cell.Workers)
	if err != nil {
		return nil, err
	}
	return &restClient{httpFront: f, t: t, opts: h.withOptions()}, nil
}

// Do reads the row, applies op and writes it back under If-Match, and
// again after a 412, until the lab's attempt limit.
func (c *restClient) Do(ctx context.Context, w int, op operation) error {
	u := c.base + "/rows/" + url.PathEscape(op.Keys[0])
	return occ.Retry(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return err
		}
		var row tableRow
		if resp.StatusCode == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&row)
		} else {
			err = readOutcome(resp)
		}
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("GET %s: %w", op.Keys[0], err)
		}
		etag := resp.Header.Get("ETag")
		v := [1]int64{row.N}
		if err := op.Apply(v[:]); err != nil {
			return err
		}
		row.N = v[0]
		body, err := json.Marshal(row)
		if err != nil {
			return err
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("If-Match", etag)
		req.Header.Set("Content-Type", "application/json")
		resp, err = c.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			_, _ = io.Copy(io.Discard, resp.Body)
			return nil
		case http.StatusPreconditionFailed:
			// Someone wrote first: read again.
			_, _ = io.Copy(io.Discard, resp.Body)
			return &cas.ConflictError{Key: op.Keys[0]}
		}
		return fmt.Errorf("PUT %s: %w", op.Keys[0], readOutcome(resp))
	}, c.opts[w]...)
}

// Close stops the service.
func (c *restClient) Close(ctx context.Context) error { return c.close(ctx) }

// Value implements valueReader: the row's n.
func (c *restClient) Value(ctx context.Context, key string) (int64, error) {
	r, err := c.t.get(ctx, key)
	return r.N, err
}
