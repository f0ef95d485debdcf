package main

import (
	"context"
	"database/sql"
	"io"
	"log"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/internal/faultproxy"
	"github.com/occkit/occkit/internal/servers"
)

// openMySQL is the mysql backend: sqlcas (dialect MySQL) on the MariaDB
// of OCCKIT_MYSQL_DSN, or on a throwaway one started with
// scripts/servers/mariadb.sh, under drop, cut and restart.
func openMySQL(ctx context.Context, e *env) (backend, error) {
	// go-sql-driver logs every broken connection; the faults break
	// hundreds on purpose, and the rows count what they did.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	dsn, err := e.serverURL(ctx, "mariadb", "OCCKIT_MYSQL_DSN", servers.MariaDBBinary)
	if err != nil {
		return backend{}, err
	}
	cfg, direct, err := openMySQLDB(ctx, dsn)
	if err != nil {
		return backend{}, err
	}
	e.atExit(func() { _ = direct.Close() })
	open := func(ctx context.Context, fault, ns string) (*target, error) {
		if fault != faultRestart {
			return mysqlTarget(ctx, e, cfg, direct, ns, true)
		}
		return e.restartTarget(ctx, "mariadb", "OCCKIT_MYSQL_DSN", servers.MariaDBBinary, func(dsn string) (*target, func(), error) {
			ocfg, own, err := openMySQLDB(ctx, dsn)
			if err != nil {
				return nil, nil, err
			}
			tg, err := mysqlTarget(ctx, e, ocfg, own, ns, false)
			if err != nil {
				_ = own.Close()
				return nil, nil, err
			}
			return tg, func() { _ = own.Close() }, nil
		})
	}
	return backend{name: "mysql", faults: []string{faultDrop, faultCut, faultRestart}, open: open}, nil
}

// openMySQLDB parses dsn (with interpolateParams on, as sqlcas asks) and
// opens a *sql.DB that reaches the server.
func openMySQLDB(ctx context.Context, dsn string) (*mysql.Config, *sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.InterpolateParams = true
	db, err := mysqlDB(cfg)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return cfg, db, nil
}

func mysqlDB(cfg *mysql.Config) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(connector), nil
}

// mysqlTarget makes a table ns in the database of cfg, and a *sql.DB of
// its own for the workloads, through a fault proxy if proxied.
func mysqlTarget(ctx context.Context, e *env, cfg *mysql.Config, direct *sql.DB, ns string, proxied bool) (*target, error) {
	ds, err := sqlcas.New(direct, sqlcas.Config{Dialect: sqlcas.MySQL, Table: ns})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ds.CreateTable(cctx); err != nil {
		return nil, err
	}
	dropTable := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = direct.ExecContext(dctx, "DROP TABLE IF EXISTS `"+ns+"`")
	}
	oc := cfg.Clone()
	var p *faultproxy.Proxy
	if proxied {
		if p, err = faultproxy.New(cfg.Addr); err != nil {
			dropTable()
			return nil, err
		}
		oc.Addr = p.Addr()
	}
	oc.Timeout = callTimeout // dialing; each call's context bounds the rest
	db, err := mysqlDB(oc)
	if err != nil {
		if p != nil {
			_ = p.Close()
		}
		dropTable()
		return nil, err
	}
	db.SetMaxOpenConns(2 * e.workers)
	db.SetMaxIdleConns(2 * e.workers)
	ops, err := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.MySQL, Table: ns})
	if err != nil {
		_ = db.Close()
		if p != nil {
			_ = p.Close()
		}
		dropTable()
		return nil, err
	}
	return &target{ops: ops, direct: ds, proxy: p, retryable: sqlcas.Retryable, close: func() {
		if p != nil {
			_ = p.Close()
		}
		_ = db.Close()
		dropTable()
	}}, nil
}
