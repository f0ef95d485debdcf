package backends

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// pgDriver is a pgxpool working in a schema (or the search_path's).
type pgDriver struct {
	pool  *pgxpool.Pool
	scope string
}

// pgConfig returns the pool configuration of the server at url (named by
// envVar) for a client with opts.
func pgConfig(url, envVar string, opts ClientOptions) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envVar, err)
	}
	if opts.DialTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = opts.DialTimeout
	}
	if opts.Conns > 0 {
		cfg.MaxConns = int32(opts.Conns)
	}
	if opts.Scope != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = opts.Scope
	}
	return cfg, nil
}

func connectPostgres(ctx context.Context, s *Server, opts ClientOptions) (_ *pgDriver, err error) {
	cfg, err := pgConfig(s.URL, s.EnvVar, opts)
	if err != nil {
		return nil, err
	}
	if opts.Via != "" {
		host, port, err := net.SplitHostPort(opts.Via)
		if err != nil {
			return nil, err
		}
		pn, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(pn), nil
	}
	d := &pgDriver{scope: opts.Scope}
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.pool.Close()
		}
	}()
	if opts.CreateScope && opts.Scope != "" {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := d.pool.Exec(cctx, "CREATE SCHEMA "+pgx.Identifier{opts.Scope}.Sanitize()); err != nil {
			return nil, fmt.Errorf("create schema: %w", err)
		}
	}
	return d, nil
}

// ident returns the quoted name of name in the driver's schema.
func (d *pgDriver) ident(name string) string {
	if d.scope == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{d.scope, name}.Sanitize()
}

func (d *pgDriver) store(ns string) (cas.Store, error) {
	return pgcas.New(d.pool, pgcas.Config{Table: ns, Schema: d.scope})
}

func (d *pgDriver) create(ctx context.Context, ns string) error {
	s, err := pgcas.New(d.pool, pgcas.Config{Table: ns, Schema: d.scope})
	if err != nil {
		return err
	}
	return s.CreateTable(ctx)
}

func (d *pgDriver) drop(ctx context.Context, ns string) error {
	_, err := d.pool.Exec(ctx, "DROP TABLE IF EXISTS "+d.ident(ns))
	_, serr := d.pool.Exec(ctx, "DROP SEQUENCE IF EXISTS "+d.ident(PostgresSequence(ns)))
	return errors.Join(err, serr)
}

// PostgresSequence returns the token sequence of the PostgreSQL locker
// named name (LockerConfig.Name): the locks' namespace, which pgcas
// hashes into each lock's key.
func PostgresSequence(name string) string { return name + "_lock_token" }

func (d *pgDriver) locker(ctx context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error) {
	l, err := pgcas.NewLocker(d.pool, pgcas.LockerConfig{TokenCounter: PostgresSequence(cfg.Name), CheckInterval: cfg.CheckInterval})
	if err != nil {
		return nil, nil, err
	}
	if err := l.CreateTokenCounter(ctx); err != nil {
		return nil, nil, err
	}
	return l, func() error { return nil }, nil
}

func (d *pgDriver) describe(ctx context.Context) (string, string, error) {
	var version, fsync, syncCommit string
	if err := d.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&version, &fsync, &syncCommit); err != nil {
		return "", "", err
	}
	durable := fmt.Sprintf("fsync=%s, synchronous_commit=%s", fsync, syncCommit)
	if fsync == "off" {
		durable += " (throwaway data: commits are not flushed to disk)"
	}
	return "PostgreSQL " + version, durable, nil
}

func (d *pgDriver) dropScope(ctx context.Context) error {
	if d.scope == "" {
		return nil
	}
	_, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{d.scope}.Sanitize()+" CASCADE")
	return err
}

func (d *pgDriver) native(c *Client) { c.pg = d.pool }

func (d *pgDriver) close() error {
	d.pool.Close()
	return nil
}
