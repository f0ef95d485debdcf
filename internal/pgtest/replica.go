package pgtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/occkit/occkit/internal/servers"
	"github.com/occkit/occkit/internal/testenv"
)

// EnvReplicaURL is the environment variable holding the URL of a hot
// standby streaming from the server of EnvURL (make test starts one; see
// scripts/servers/postgres.sh).
const EnvReplicaURL = "OCCKIT_PG_REPLICA_URL"

// ReplicaURL returns the replica's URL from OCCKIT_PG_REPLICA_URL, or fails
// the test: a test that reads from a replica never passes without one.
func ReplicaURL(t testing.TB) string {
	t.Helper()
	return testenv.Server{Env: EnvReplicaURL, What: "a streaming replica of the server of " + EnvURL,
		Script: "postgres.sh --replica"}.Lookup(t)
}

// ReplicaPool returns a pool on the replica whose connections work in the
// schema of primary, a pool made by Pool or Open from Config (the
// schema's first entry in its search_path), after letting each configure
// function adjust its configuration. The schema and the tables in it
// appear on the replica once it has replayed their creation: call
// CatchUp after creating them. The pool is closed when the test ends.
func ReplicaPool(t testing.TB, primary *pgxpool.Pool, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(ReplicaURL(t))
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", EnvReplicaURL, err)
	}
	if sp, ok := primary.Config().ConnConfig.RuntimeParams["search_path"]; ok {
		cfg.ConnConfig.RuntimeParams["search_path"] = sp
	}
	for _, f := range configure {
		f(cfg)
	}
	pool := Open(t, cfg)
	var standby bool
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		t.Fatalf("pgtest: %s: %v", EnvReplicaURL, err)
	}
	if !standby {
		t.Fatalf("pgtest: %s names a server that is not a standby (pg_is_in_recovery() is false)", EnvReplicaURL)
	}
	return pool
}

// CatchUp waits until the replica has replayed everything the primary had
// written when it was called, and fails the test if that takes longer
// than a minute (replay paused with PauseReplay, say).
func CatchUp(t testing.TB, primary, replica *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := WaitReplayed(ctx, primary, replica); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// WaitReplayed waits until the replica has replayed everything the primary
// had written when it was called, or ctx ends (servers.WaitReplayed).
func WaitReplayed(ctx context.Context, primary, replica *pgxpool.Pool) error {
	return servers.WaitReplayed(ctx, primary, replica)
}

// PauseReplay pauses the replica's replay of the primary's WAL
// (pg_wal_replay_pause): it keeps receiving WAL but its reads see the
// state at the pause until ResumeReplay. It returns when the pause has
// taken effect. The replay is resumed when the test ends, whatever
// happens. One replica serves every test, also those of other packages
// that go test runs at the same time: they wait out a pause (CatchUp
// waits up to a minute, castest's and tabletest's read-backs 5 s), so
// keep pauses to a few seconds.
//
// Tests of several packages pause the one replica of make test, at the
// same time: a pause holds an advisory lock on the replica (a
// connection of its own, until ResumeReplay), so that one test's resume
// never ends another's pause early; a second pause waits for the first.
func PauseReplay(t testing.TB, replica *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Cleanup(func() { ResumeReplay(t, replica) })
	lock, err := pgx.ConnectConfig(ctx, replica.Config().ConnConfig.Copy())
	if err == nil {
		if _, err = lock.Exec(ctx, `SELECT pg_advisory_lock($1)`, pauseLock); err != nil {
			lock.Close(context.WithoutCancel(ctx))
		}
	}
	if err != nil {
		t.Fatalf("pgtest: wait for the replica's replay to be this test's to pause: %v", err)
	}
	pauses.Store(replica, lock)
	if _, err := replica.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatalf("pgtest: pause the replica's replay: %v", err)
	}
	for {
		var state string
		if err := replica.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state); err != nil {
			t.Fatalf("pgtest: the replica's replay state: %v", err)
		}
		if state == "paused" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: the replica's replay did not pause: state %q", state)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ResumeReplay resumes the replica's replay (pg_wal_replay_resume). It
// runs on a connection of its own, so that it works while the test's
// pool is closing or exhausted.
func ResumeReplay(t testing.TB, replica *pgxpool.Pool) {
	t.Helper()
	// Only the pause this test holds: once resumed, the replay may be
	// another test's to pause (see PauseReplay).
	lock, ok := pauses.LoadAndDelete(replica)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The lock's own connection resumes, then closing it ends the
	// advisory lock: the next test may pause.
	conn := lock.(*pgx.Conn)
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Errorf("pgtest: resume the replica's replay: %v", err)
	}
}

// pauseLock is the advisory lock key that PauseReplay holds on the replica.
const pauseLock = 0x6f63636b6974 // "occkit"

// pauses holds, per replica pool, the connection whose advisory lock
// marks the pause of a test of this process.
var pauses sync.Map
