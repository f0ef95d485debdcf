package sqlcas

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Dialect names the SQL a Store speaks: the database behind the *sql.DB.
type Dialect uint8

// The dialects.
const (
	// MySQL is MySQL 8 or MariaDB 10.6 and later, with
	// github.com/go-sql-driver/mysql. Open it with interpolateParams=true
	// in the DSN (see the package documentation).
	MySQL Dialect = iota + 1
	// SQLite is SQLite with modernc.org/sqlite (pure Go, no cgo), in WAL
	// mode with a busy timeout (see the package documentation).
	SQLite
	// Postgres is PostgreSQL with pgx's database/sql driver
	// (github.com/jackc/pgx/v5/stdlib).
	Postgres
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

func (d Dialect) valid() bool { return d >= MySQL && d <= Postgres }

// maxIdentifier is the longest identifier the dialect keeps as it is.
func (d Dialect) maxIdentifier() int {
	switch d {
	case MySQL:
		return 64 // characters; checked as bytes, which is stricter
	case Postgres:
		return 63 // bytes; longer names are truncated
	}
	return 1024 // SQLite has no limit; keep names sane
}

// quote returns name as one quoted identifier: backticks for MySQL, double
// quotes otherwise, the quote character doubled inside. Names are never
// spliced into SQL unquoted.
func (d Dialect) quote(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("empty identifier")
	case len(name) > d.maxIdentifier():
		return "", fmt.Errorf("identifier %q is %d bytes, %s's limit is %d", name, len(name), d, d.maxIdentifier())
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("identifier %q contains a NUL byte", name)
	case !utf8.ValidString(name):
		return "", fmt.Errorf("identifier %q is not valid UTF-8", name)
	case d == MySQL && strings.HasSuffix(name, " "):
		return "", fmt.Errorf("identifier %q ends with a space, which MySQL refuses", name)
	}
	q := `"`
	if d == MySQL {
		q = "`"
	}
	return q + strings.ReplaceAll(name, q, q+q) + q, nil
}

// ph returns the placeholder of the i-th parameter (from 1).
func (d Dialect) ph(i int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(i)
	}
	return "?"
}

// phs returns placeholders for parameters from..from+n-1, comma separated,
// each followed by cast (for PostgreSQL, where a parameter in a CASE or
// an IN list has no type of its own).
func (d Dialect) phs(from, n int, cast string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.ph(from + i))
		b.WriteString(cast)
	}
	return b.String()
}

// keyCast and blobCast type a parameter for PostgreSQL ("" elsewhere).
func (d Dialect) keyCast() string {
	if d == Postgres {
		return "::text"
	}
	return ""
}

func (d Dialect) blobCast() string {
	if d == Postgres {
		return "::bytea"
	}
	return ""
}

// lockShare is the suffix of a read that must see the latest committed row
// also inside a caller's REPEATABLE READ transaction: a locking read.
// SQLite has one writer at a time and no such clause.
func (d Dialect) lockShare() string {
	switch d {
	case MySQL:
		return " LOCK IN SHARE MODE" // MySQL 8 and MariaDB both accept it
	case Postgres:
		return " FOR SHARE"
	}
	return ""
}

// forUpdate is the suffix of a read that locks its rows for writing.
func (d Dialect) forUpdate() string {
	if d == SQLite {
		return ""
	}
	return " FOR UPDATE"
}

// Largest limits a Store accepts, per dialect: the longest key the
// primary key's index can hold, and the largest value.
const (
	// MaxKeyBytesLimit is the longest key a Store accepts on any dialect:
	// InnoDB's longest index key (3072 bytes) is the tightest; PostgreSQL
	// allows 2048 (a btree entry must fit a third of a page).
	MaxKeyBytesLimit = 2048
	// MaxValueBytesLimit is the largest value: PostgreSQL's 1 GB field.
	// MySQL also needs max_allowed_packet above the value's size, and
	// SQLite its SQLITE_MAX_LENGTH (1e9 by default).
	MaxValueBytesLimit = 1<<30 - 1
)

// ddl returns the CREATE TABLE statement of a Store's table.
func (d Dialect) ddl(table string, maxKey int) string {
	switch d {
	case MySQL:
		return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    k           VARBINARY(%d) NOT NULL PRIMARY KEY, -- the key's UTF-8 bytes, compared as bytes
    value       LONGBLOB NULL,                       -- NULL: deleted (a tombstone, invisible to Get)
    version     BIGINT NOT NULL,                     -- 1 on first create, +1 with every write: never reused
    fence_token BIGINT NOT NULL DEFAULT 0,           -- largest fencing token that has written the key
    write_id    BINARY(16) NOT NULL                  -- the last write's id, to resolve lost replies
) ENGINE=InnoDB`, table, maxKey)
	case SQLite:
		return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    k           TEXT    NOT NULL PRIMARY KEY,    -- compared as bytes (BINARY collation)
    value       BLOB,                            -- NULL: deleted (a tombstone, invisible to Get)
    version     INTEGER NOT NULL,                -- 1 on first create, +1 with every write: never reused
    fence_token INTEGER NOT NULL DEFAULT 0,      -- largest fencing token that has written the key
    write_id    BLOB    NOT NULL                 -- the last write's id, to resolve lost replies
)`, table)
	}
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    k           text COLLATE "C" PRIMARY KEY, -- compared as bytes
    value       bytea,                        -- NULL: deleted (a tombstone, invisible to Get)
    version     bigint NOT NULL,              -- 1 on first create, +1 with every write: never reused
    fence_token bigint NOT NULL DEFAULT 0,    -- largest fencing token that has written the key
    write_id    bytea  NOT NULL               -- the last write's id, to resolve lost replies
)`, table)
}
