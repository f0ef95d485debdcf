#!/usr/bin/env bash
# ceiling.sh: how fast the server itself runs a transfer's statements, with
# the Go client out of the way. It sends, from the server's own C client
# (pgbench, mariadb-slap), 8 clients over 1000 rows of a table laid out as
# occkit's store tables are:
#   lock    what lock-pg-for-update / lock-mysql-for-update send: begin,
#           the locking read of both rows, two UPDATEs, commit;
#   occ     what occ-txn sends: the plain read of both rows, then the
#           store's one-statement commit of both (PostgreSQL: pgcas's
#           locked CTE; MariaDB: sqlcas's strict UPDATE);
#   cached  what a warm occ-cached sends: the commit alone.
# The ratios occ/lock and cached/lock are the most the lab's transfer
# goals can read on this machine (docs/benchmarks.md, the goals' reasons).
#
# Usage: bash scripts/ceiling.sh [postgres] [mysql]   (default: both)
# Servers: OCCKIT_PG_URL and OCCKIT_MYSQL_DSN, as scripts/servers/*.sh
# print them. ROUNDS (default 3) runs of each script, in turn; each run
# is RUN_SECONDS (default 5) on PostgreSQL, TRANSFERS (default 16000) on
# MariaDB. The table occkit_ceiling is created and dropped.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
RUN_SECONDS=${RUN_SECONDS:-5}
TRANSFERS=${TRANSFERS:-16000}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(postgres mysql)
for t in "${targets[@]}"; do
	case $t in
	postgres | mysql) ;;
	*)
		echo "ceiling.sh: unknown server $t (postgres, mysql)" >&2
		exit 2
		;;
	esac
done
dir=$(mktemp -d /tmp/occkit-ceiling.XXXXXX)
drop=() # commands that drop the table, run on exit whatever happened
cleanup() {
	for c in "${drop[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

postgres() {
	: "${OCCKIT_PG_URL:?OCCKIT_PG_URL is not set: start PostgreSQL with scripts/servers/postgres.sh and run the export line it prints}"
	local pgbin
	pgbin=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
	local psql=(psql -X -q -v ON_ERROR_STOP=1 "$OCCKIT_PG_URL")
	drop+=("psql -X -q '$OCCKIT_PG_URL' -c 'DROP TABLE IF EXISTS occkit_ceiling'")
	"${psql[@]}" <<'EOF'
SET client_min_messages = warning;
DROP TABLE IF EXISTS occkit_ceiling;
CREATE TABLE occkit_ceiling (
    key         text COLLATE "C" PRIMARY KEY,
    value       bytea,
    version     bigint GENERATED ALWAYS AS IDENTITY,
    fence_token bigint NOT NULL DEFAULT 0,
    write_id    uuid   NOT NULL);
INSERT INTO occkit_ceiling (key, value, write_id)
SELECT 'k' || i, '1000', gen_random_uuid() FROM generate_series(0, 999) i;
EOF
	cat >"$dir/pg-lock.sql" <<'EOF'
\set a random(0, 999)
\set b random(0, 999)
BEGIN;
SELECT key, value FROM occkit_ceiling WHERE key IN ('k' || :a, 'k' || :b) AND value IS NOT NULL ORDER BY key FOR UPDATE;
UPDATE occkit_ceiling SET value = '999', version = DEFAULT, write_id = gen_random_uuid() WHERE key = 'k' || :a;
UPDATE occkit_ceiling SET value = '1001', version = DEFAULT, write_id = gen_random_uuid() WHERE key = 'k' || :b;
COMMIT;
EOF
	# The commit: pgcas's statement for two rows (commit_rows.go), with
	# the versions the read returned (occ) or, as a warm cache knows them,
	# the rows' own (cached).
	local commit
	commit=$(
		cat <<'EOF'
WITH lk AS (
    SELECT key, version, value, fence_token FROM occkit_ceiling
    WHERE key IN ('k' || :a, 'k' || :b) ORDER BY key FOR UPDATE), w AS (
    UPDATE occkit_ceiling SET value = CASE key WHEN 'k' || :a THEN '999'::bytea WHEN 'k' || :b THEN '1001'::bytea END,
        version = DEFAULT, write_id = gen_random_uuid()
    WHERE key IN ('k' || :a, 'k' || :b)
    AND (SELECT count(*) FROM lk WHERE value IS NOT NULL AND ((key = 'k' || :a AND version = VA) OR (key = 'k' || :b AND version = VB))) = 2
    RETURNING key, version)
SELECT lk.key, w.version, lk.version, lk.value, lk.fence_token FROM lk LEFT JOIN w USING (key);
EOF
	)
	commit=$(echo "$commit" | tr '\n' ' ')
	{
		echo '\set a random(0, 999)'
		echo '\set b random(0, 999)'
		# The read of both rows, as one row so that \gset keeps the
		# versions.
		echo "SELECT max(version) FILTER (WHERE key = 'k' || :a) AS va, max(version) FILTER (WHERE key = 'k' || :b) AS vb, string_agg(encode(value, 'escape'), ',') AS vals FROM occkit_ceiling WHERE key IN ('k' || :a, 'k' || :b) AND value IS NOT NULL \\gset"
		echo "$commit" | sed 's/VA/:va/; s/VB/:vb/'
	} >"$dir/pg-occ.sql"
	{
		echo '\set a random(0, 999)'
		echo '\set b random(0, 999)'
		echo "$commit" | sed 's/VA/version/; s/VB/version/'
	} >"$dir/pg-cached.sql"
	echo "PostgreSQL ($("$pgbin/postgres" --version)): transfers/s, 8 clients, ${RUN_SECONDS}s a run, prepared"
	# Rows written per transfer (2 when every commit applied) come from
	# the identity sequence, which every write draws from.
	local out before after
	for r in $(seq 1 "$ROUNDS"); do
		for s in lock occ cached; do
			before=$("${psql[@]}" -At -c 'SELECT max(version) FROM occkit_ceiling')
			out=$("$pgbin/pgbench" -n -M prepared -c 8 -j 2 -T "$RUN_SECONDS" -f "$dir/pg-$s.sql" "$OCCKIT_PG_URL" 2>&1) || {
				echo "$out" >&2
				return 1
			}
			after=$("${psql[@]}" -At -c 'SELECT max(version) FROM occkit_ceiling')
			echo "$out" | awk -v s="$s" -v r="$r" -v w="$((after - before))" '
				/^number of transactions actually processed/ {n = $NF}
				/^tps = / {printf "  round %s  %-6s %6d  (%.2f rows written a transfer)\n", r, s, $3, n ? w / n : 0}'
		done
	done
	"${psql[@]}" -c 'DROP TABLE occkit_ceiling'
}

mysql() {
	: "${OCCKIT_MYSQL_DSN:?OCCKIT_MYSQL_DSN is not set: start MariaDB with scripts/servers/mariadb.sh and run the export line it prints}"
	# user[:password]@tcp(host:port)/db
	local user=${OCCKIT_MYSQL_DSN%%@*} rest=${OCCKIT_MYSQL_DSN#*@tcp(}
	local addr=${rest%%)*} db=${rest#*)/}
	db=${db%%\?*}
	local pass=""
	if [[ $user == *:* ]]; then pass=${user#*:}; user=${user%%:*}; fi
	local conn=(-h "${addr%:*}" -P "${addr##*:}" -u "$user")
	[ -z "$pass" ] || conn+=("-p$pass")
	drop+=("mariadb ${conn[*]} $db -e 'DROP TABLE IF EXISTS occkit_ceiling'")
	mariadb "${conn[@]}" "$db" <<'EOF'
DROP TABLE IF EXISTS occkit_ceiling;
CREATE TABLE occkit_ceiling (
    k           VARBINARY(255) NOT NULL PRIMARY KEY,
    value       LONGBLOB NULL,
    version     BIGINT NOT NULL,
    fence_token BIGINT NOT NULL DEFAULT 0,
    write_id    BINARY(16) NOT NULL) ENGINE=InnoDB;
INSERT INTO occkit_ceiling (k, value, version, write_id)
SELECT CONCAT('k', seq), '1000', 1, 'aaaaaaaaaaaaaaaa' FROM seq_0_to_999;
EOF
	# mariadb-slap sends fixed statements: each script picks its keys
	# with one SET first, timed alone (set) and taken off the others.
	local pick="SET @a = CONCAT('k', FLOOR(RAND() * 1000)), @b = CONCAT('k', FLOOR(RAND() * 1000));"
	# The commit: sqlcas's strict UPDATE for two rows (commit_strict.go);
	# a row off its version would fail the statement, which stops
	# mariadb-slap, so both branches write (the check is still made, and
	# the rows written a transfer are 2 whatever it found: on MariaDB they
	# show that every statement ran, not that every commit applied).
	local commit="SET STATEMENT sql_mode = 'STRICT_ALL_TABLES' FOR UPDATE occkit_ceiling SET version = CASE k WHEN @a THEN IF(version = @va AND value IS NOT NULL, version + 1, version + 1) WHEN @b THEN IF(version = @vb AND value IS NOT NULL, version + 1, version + 1) END, value = CASE k WHEN @a THEN '999' WHEN @b THEN '1001' END, write_id = 'cccccccccccccccc' WHERE k IN (@a, @b);"
	echo "$pick" >"$dir/my-set.sql"
	cat >"$dir/my-lock.sql" <<EOF
$pick
START TRANSACTION;
SELECT k, value FROM occkit_ceiling WHERE k IN (@a, @b) ORDER BY k FOR UPDATE;
UPDATE occkit_ceiling SET value = '999', version = version + 1, write_id = 'bbbbbbbbbbbbbbbb' WHERE k = @a;
UPDATE occkit_ceiling SET value = '1001', version = version + 1, write_id = 'bbbbbbbbbbbbbbbb' WHERE k = @b;
COMMIT;
EOF
	cat >"$dir/my-occ.sql" <<EOF
$pick
SELECT k, value, version, @va := IF(k = @a, version, @va) AS va, @vb := IF(k = @b, version, @vb) AS vb FROM occkit_ceiling WHERE k IN (@a, @b);
$commit
EOF
	printf '%s\n%s\n' "$pick" "$commit" >"$dir/my-cached.sql"
	echo "MariaDB ($(mariadb --version | awk '{print $5}' | tr -d ,)): µs per transfer (the key pick taken off), 8 clients, $TRANSFERS transfers a run"
	local set_us="" before after
	for r in $(seq 1 "$ROUNDS"); do
		for s in set lock occ cached; do
			local n secs us
			n=$(grep -c . "$dir/my-$s.sql")
			before=$(mariadb "${conn[@]}" "$db" -N -e 'SELECT SUM(version) FROM occkit_ceiling')
			local out
			out=$(mariadb-slap "${conn[@]}" --create-schema="$db" --concurrency=8 --iterations=1 \
				--number-of-queries=$((TRANSFERS * n)) --query="$dir/my-$s.sql" --delimiter=";" 2>&1) || {
				echo "$out" >&2
				return 1
			}
			secs=$(echo "$out" | awk '/Average number of seconds/{print $(NF-1)}')
			if [ -z "$secs" ]; then
				echo "ceiling.sh: mariadb-slap printed no time:" >&2
				echo "$out" >&2
				return 1
			fi
			us=$(awk -v s="$secs" -v t="$TRANSFERS" 'BEGIN{printf "%.1f", s * 1e6 / t}')
			if [ "$s" = set ]; then
				set_us=$us
				echo "  round $r  set    $us (the key pick alone)"
			else
				after=$(mariadb "${conn[@]}" "$db" -N -e 'SELECT SUM(version) FROM occkit_ceiling')
				awk -v s="$s" -v r="$r" -v u="$us" -v p="$set_us" -v w="$((after - before))" -v t="$TRANSFERS" \
					'BEGIN{printf "  round %s  %-6s %6.1f  (%.2f rows written a transfer)\n", r, s, u - p, w / t}'
			fi
		done
	done
	mariadb "${conn[@]}" "$db" -e 'DROP TABLE occkit_ceiling'
}

for t in "${targets[@]}"; do
	"$t"
done
