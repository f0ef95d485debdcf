package story

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
)

// redisAddr is how to reach one Redis server; it travels to the child.
type redisAddr struct {
	Addr     string `json:"addr"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	DB       int    `json:"db,omitempty"`
}

func redisAddrOf(o *redis.Options) redisAddr {
	return redisAddr{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB}
}

// client returns a new client of the server. Its commands are never
// retried by go-redis (a fault must show, not be papered over) and
// honour their context's deadline.
func (a redisAddr) client() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: a.Addr, Username: a.Username, Password: a.Password, DB: a.DB,
		MaxRetries:            -1,
		DialTimeout:           2 * time.Second,
		DialerRetries:         1,
		DialerRetryTimeout:    5 * time.Millisecond,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
		PoolSize:              4,
	})
}

// via returns the same server reached at addr (a proxy in front of it).
func (a redisAddr) via(addr string) redisAddr {
	a.Addr = addr
	return a
}

// endpoints are where a run's servers listen.
type endpoints struct {
	// Redis holds the data of every mode, and the locks of redis,
	// redis-watchdog and fenced.
	Redis   redisAddr   `json:"redis"`
	Redlock []redisAddr `json:"redlock,omitempty"`
	ZK      string      `json:"zk,omitempty"`
	Etcd    string      `json:"etcd,omitempty"`
	// MySQL is the mysql mode's server, a go-sql-driver/mysql DSN.
	MySQL string `json:"mysql,omitempty"`
}

// runSpec is one story in one mode: what both processes (the runner and a
// child client) need to know to take part in it.
type runSpec struct {
	Story string        `json:"story"`
	Mode  string        `json:"mode"`
	NS    string        `json:"ns"`
	TTL   time.Duration `json:"ttl"`
	// Start is when the story started (Unix nanoseconds): events are
	// timed from it, in both processes.
	Start     int64     `json:"start"`
	Initial   int64     `json:"initial"`
	Endpoints endpoints `json:"endpoints"`
}

// run is a runSpec being run in this process: direct connections to the
// servers (never through a fault), the lock service and where events go.
type run struct {
	spec  runSpec
	mode  modeSpec
	start time.Time
	sink  sink
	rdb   *redis.Client   // the data's Redis, direct
	store *rediscas.Store // the rediscas store on rdb (fenced, occ)
	lock  lockService     // nil in occ mode
	// rec is the runner's recorder (nil in a child process).
	rec *recorder
}

// openRun connects to the run's servers.
func openRun(ctx context.Context, spec runSpec, s sink) (*run, error) {
	m, err := lookup(modes(), "mode", spec.Mode)
	if err != nil {
		return nil, err
	}
	r := &run{spec: spec, mode: m, start: time.Unix(0, spec.Start), sink: s, rdb: spec.Endpoints.Redis.client()}
	if r.store, err = rediscas.New(r.rdb, rediscas.Config{Prefix: r.redisKey("cas:")}); err != nil {
		r.close()
		return nil, err
	}
	if m.lock != nil {
		if r.lock, err = m.lock(ctx, r); err != nil {
			r.close()
			return nil, fmt.Errorf("%s lock: %w", m.Name, err)
		}
	}
	return r, nil
}

func (r *run) close() {
	if r.lock != nil {
		r.lock.close()
	}
	r.rdb.Close()
}

// at is the time since the story started.
func (r *run) at() time.Duration { return time.Since(r.start) }

// redisKey returns a Redis key of the run's namespace.
func (r *run) redisKey(name string) string { return "occkit-story:" + r.spec.NS + ":" + name }

// The run's data keys.
func (r *run) stockKey() string { return r.redisKey("stock") }
func (r *run) auditKey() string { return r.redisKey("audit") }

// typed returns the stock as an int64 in s.
func typed(s cas.Store) *cas.Typed[int64] { return cas.NewTyped(s, cas.JSON[int64]()) }

// seed writes the initial stock.
func (r *run) seed(ctx context.Context) error {
	if r.mode.data == plainData {
		return r.rdb.Set(ctx, r.stockKey(), r.spec.Initial, 0).Err()
	}
	_, err := typed(r.store).CompareAndSwap(ctx, "stock", 0, r.spec.Initial)
	return err
}

// final reads the stock back, directly from the server.
func (r *run) final(ctx context.Context) (int64, error) {
	if r.mode.data == plainData {
		return r.rdb.Get(ctx, r.stockKey()).Int64()
	}
	v, _, err := typed(r.store).Get(ctx, "stock")
	return v, err
}

// auditEntry is one accepted write, as appended to the audit list.
type auditEntry struct {
	Client string `json:"c"`
	// Read is the stock the client read, Wrote what it wrote.
	Read  int64 `json:"r"`
	Wrote int64 `json:"w"`
	// Held: the lock service showed the client's grant just before the
	// write (always true without a lock).
	Held  bool   `json:"h"`
	Token uint64 `json:"t,omitempty"`
	// Version orders the writes of the rediscas modes.
	Version uint64 `json:"v,omitempty"`
}

// audit reads the accepted writes back, in the order they were applied.
func (r *run) audit(ctx context.Context) ([]auditEntry, error) {
	out, err := readJSONList[auditEntry](ctx, r.rdb, r.auditKey(), "audit")
	if err != nil {
		return nil, err
	}
	if r.mode.data != plainData {
		// Appended after the write, so possibly out of order; the
		// versions are the store's order.
		sort.SliceStable(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	}
	return out, nil
}

// readJSONList reads the Redis list key, an entry of the kind named what
// per element, as JSON.
func readJSONList[T any](ctx context.Context, rdb *redis.Client, key, what string) ([]T, error) {
	raw, err := rdb.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]T, len(raw))
	for i, s := range raw {
		if err := json.Unmarshal([]byte(s), &out[i]); err != nil {
			return nil, fmt.Errorf("%s entry %q: %w", what, s, err)
		}
	}
	return out, nil
}

// cleanup removes the run's keys from every server.
func (r *run) cleanup(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	errs := []error{backends.DeleteRedisPrefix(dctx, r.rdb, r.redisKey(""))}
	if r.lock != nil {
		errs = append(errs, r.lock.cleanup(ctx))
	}
	return errors.Join(errs...)
}
