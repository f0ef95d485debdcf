package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/servers"
)

// envPostgresURL names the PostgreSQL server the lab uses; when it is
// unset, the lab starts one (scripts/servers/postgres.sh) if PostgreSQL 15
// is installed.
const envPostgresURL = "OCCKIT_PG_URL"

var postgresSpecs = []backendSpec{
	{
		Name:  "postgres",
		About: "pgcas on PostgreSQL: OCCKIT_PG_URL, or a throwaway server started with scripts/servers/postgres.sh",
		Open:  openPostgres,
	},
}

// postgresService is implemented by the postgres backend, for strategies
// that lock through PostgreSQL.
type postgresService interface {
	// PGPool is the lab's pool; its connections work in the lab's schema.
	PGPool() *pgxpool.Pool
	// AdvisoryLocker hands out session advisory-lock leases.
	AdvisoryLocker() *pgcas.Locker
	// Table returns the quoted name of the pgcas table holding a cell's
	// data, for statements the adapter does not offer.
	Table(ns string) string
}

type pgBackend struct {
	pool    *pgxpool.Pool
	schema  string
	server  string
	durable string
	locker  *pgcas.Locker
	started *servers.Script
	// url is the server's own URL (not the proxy's); attached is set in a
	// --procs child, which works in its parent's schema and leaves it.
	url      string
	attached bool
}

// envLabPGSchema passes the lab's schema to its --procs children.
const envLabPGSchema = "OCCKIT_LAB_PG_SCHEMA"

// childEnv implements childEnver.
func (b *pgBackend) childEnv() []string {
	return []string{envPostgresURL + "=" + b.url, envLabPGSchema + "=" + b.schema}
}

func openPostgres(ctx context.Context, env *Env) (_ service, err error) {
	b := &pgBackend{}
	defer func() {
		if err != nil {
			b.close(context.WithoutCancel(ctx))
		}
	}()
	u, started, err := env.reach(ctx, "postgres", envPostgresURL, servers.PostgresBinary)
	if err != nil {
		return nil, err
	}
	b.started = started
	b.url = u
	if u, err = env.dialURL(u); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnavailable, envPostgresURL, err)
	}
	// Session advisory leases pin a connection each, and a waiting
	// Acquire holds one too: a worker may hold two leases (transfer) and
	// borrow a third connection for the data.
	cfg.MaxConns = int32(3*max(env.MaxWorkers, DefaultWorkers) + 4)
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	b.schema = "occbench_" + hex.EncodeToString(rb[:])
	if s := env.getenv(envLabPGSchema); s != "" {
		b.schema, b.attached = s, true // a --procs child: the parent's schema
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = b.schema

	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(octx, u)
	if err != nil {
		return nil, fmt.Errorf("%w: connect to %s: %w", errUnavailable, redactURL(u), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version, fsync, syncCommit string
	if err := conn.QueryRow(octx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&version, &fsync, &syncCommit); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if !b.attached {
		if _, err := conn.Exec(octx, "CREATE SCHEMA "+pgx.Identifier{b.schema}.Sanitize()); err != nil {
			return nil, fmt.Errorf("%w: create schema: %w", errUnavailable, err)
		}
	}
	if b.pool, err = pgxpool.NewWithConfig(octx, cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if b.locker, err = pgcas.NewLocker(b.pool, pgcas.LockerConfig{Sequence: "lab_lock_token"}); err != nil {
		return nil, err
	}
	if err := b.locker.CreateSequence(octx); err != nil {
		return nil, err
	}
	where := "at " + redactURL(b.url) + " (" + envPostgresURL + ")"
	if b.started != nil {
		where = "at " + redactURL(b.url) + ", started by the lab with scripts/servers/postgres.sh"
	}
	where += env.via()
	b.server = fmt.Sprintf("PostgreSQL %s %s, pool of %d connections", version, where, cfg.MaxConns)
	b.durable = fmt.Sprintf("fsync=%s, synchronous_commit=%s", fsync, syncCommit)
	if fsync == "off" {
		b.durable += " (throwaway data: commits are not flushed to disk)"
	}
	env.logf("postgres: %s; %s", b.server, b.durable)
	return b, nil
}

// redactURL drops a password from a URL for the report.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

var pgTuning = retryTuning{Retryable: pgcas.Retryable}

func (b *pgBackend) PGPool() *pgxpool.Pool         { return b.pool }
func (b *pgBackend) AdvisoryLocker() *pgcas.Locker { return b.locker }
func (b *pgBackend) Table(ns string) string        { return pgx.Identifier{b.schema, ns}.Sanitize() }

func (b *pgBackend) Info() backendInfo {
	return backendInfo{
		Name:       "postgres",
		Server:     b.server,
		Durability: b.durable,
		Locker:     "pgcas.Locker (session pg_advisory_lock on a pinned connection; tokens from a sequence)",
		BackOff:    describeBackOff(pgTuning),
	}
}

func (b *pgBackend) tuning() retryTuning { return pgTuning }

func (b *pgBackend) NewStore(ctx context.Context, ns string) (cas.Store, func(context.Context) error, error) {
	s, err := pgcas.New(b.pool, pgcas.Config{Table: ns, Schema: b.schema})
	if err != nil {
		return nil, nil, err
	}
	if err := s.CreateTable(ctx); err != nil {
		return nil, nil, err
	}
	drop := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := b.pool.Exec(ctx, "DROP TABLE IF EXISTS "+b.Table(ns))
		return err
	}
	return s, drop, nil
}

func (b *pgBackend) openStore(_ context.Context, ns string) (cas.Store, error) {
	return pgcas.New(b.pool, pgcas.Config{Table: ns, Schema: b.schema})
}

func (b *pgBackend) NewLocker(context.Context, string) (hybrid.Locker, func(context.Context) error, error) {
	return b.locker, func(context.Context) error { return nil }, nil
}

func (b *pgBackend) Close(ctx context.Context) error { return b.close(ctx) }

func (b *pgBackend) close(ctx context.Context) error {
	var errs []error
	if b.pool != nil {
		if !b.attached {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := b.pool.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{b.schema}.Sanitize()+" CASCADE")
			cancel()
			errs = append(errs, err)
		}
		b.pool.Close()
		b.pool = nil
	}
	if b.started != nil {
		errs = append(errs, b.started.Stop(ctx))
		b.started = nil
	}
	return errors.Join(errs...)
}
