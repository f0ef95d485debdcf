// Package testenv finds the test servers that environment variables name
// (OCCKIT_PG_URL, OCCKIT_REDIS_URL, ...) for the packages that give tests
// a server to work in (pgtest, redistest, mysqltest, dynamotest).
//
// A test that needs a server and finds its variable unset fails, loudly
// and with the way to get one: a missing server must never pass for a
// passing test.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

// Server is a test server named by an environment variable.
type Server struct {
	// Env is the variable: "OCCKIT_REDIS_URL".
	Env string
	// What is what the test needs: "a Redis server".
	What string
	// Script is the script of scripts/servers that starts one, with its
	// arguments: "redis.sh".
	Script string
	// Own, if set, is the form of Env for a server of one's own:
	// "redis://[:password@]host:port[/db]".
	Own string
}

// Lookup returns the value of s.Env, or fails the test saying how to get
// a server.
func (s Server) Lookup(t testing.TB) string {
	t.Helper()
	v := os.Getenv(s.Env)
	if v == "" {
		own := ""
		if s.Own != "" {
			own = ", or point " + s.Env + " at a server you own (" + s.Own + ")"
		}
		t.Fatalf("%s is not set: this test needs %s. Run `make test` (it starts it), "+
			"or start it with `bash scripts/servers/%s` and run the export lines it prints%s",
			s.Env, s.What, s.Script, own)
	}
	return v
}

// UniqueName returns prefix followed by 16 random hex digits: the name of
// a schema, database or key prefix no other test uses.
func UniqueName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
