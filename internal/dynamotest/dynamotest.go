// Package dynamotest gives tests real DynamoDB-compatible HTTP servers and
// SDK clients for them:
//
//   - dynalite, a Node.js server started by `make test` (see
//     scripts/servers/dynalite.sh), found through OCCKIT_DYNALITE_URL;
//   - the HTTP server of github.com/truora/minidyn, started in process on a
//     free loopback port by [StartMinidyn].
//
// Both are driven by the real aws-sdk-go-v2 client over HTTP: nothing is
// mocked below the wire. A test that needs dynalite and finds
// OCCKIT_DYNALITE_URL unset fails, loudly and with the way to get one: a
// missing server must never pass for a passing test.
package dynamotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/occkit/occkit/internal/servers"
	"github.com/occkit/occkit/internal/testenv"
)

// EnvDynaliteURL is the environment variable holding dynalite's URL.
const EnvDynaliteURL = servers.EnvDynaliteURL

// Region is the region the test clients sign for. Local servers accept any.
const Region = servers.DynamoRegion

// Server is a DynamoDB-compatible server for tests, and what it can do.
type Server struct {
	// Name is "dynalite" or "minidyn".
	Name string
	// URL is the server's http://127.0.0.1:port endpoint.
	URL string
	// Transactions is true when the server implements TransactWriteItems.
	Transactions bool
	// ReturnsOldOnConditionFailure is true when the server honours
	// ReturnValuesOnConditionCheckFailure: ALL_OLD.
	ReturnsOldOnConditionFailure bool
}

// DynaliteURL returns dynalite's URL from OCCKIT_DYNALITE_URL, or fails
// the test.
func DynaliteURL(t testing.TB) string {
	t.Helper()
	return testenv.Server{Env: EnvDynaliteURL, What: "dynalite, a DynamoDB-compatible server", Script: "dynalite.sh",
		Own: "http://host:port, any DynamoDB endpoint"}.Lookup(t)
}

// Dynalite returns the dynalite server of OCCKIT_DYNALITE_URL, or fails the
// test. dynalite has no TransactWriteItems and ignores
// ReturnValuesOnConditionCheckFailure.
func Dynalite(t testing.TB) Server {
	t.Helper()
	return Server{Name: "dynalite", URL: DynaliteURL(t)}
}

// StartMinidyn starts minidyn's HTTP server in process on a free
// 127.0.0.1 port (servers.StartMinidyn) and stops it when the test ends.
// Each call starts an independent server with no tables.
func StartMinidyn(t testing.TB) Server {
	t.Helper()
	m := servers.StartMinidyn()
	t.Cleanup(m.Close)
	return Server{Name: "minidyn", URL: m.URL, Transactions: true, ReturnsOldOnConditionFailure: true}
}

// Servers returns both servers: dynalite (failing the test when
// OCCKIT_DYNALITE_URL is unset) and a fresh minidyn.
func Servers(t testing.TB) []Server {
	t.Helper()
	return []Server{Dynalite(t), StartMinidyn(t)}
}

// Each runs f in a subtest per server, "dynalite" then "minidyn", so that
// a missing dynalite fails its own subtest and minidyn still runs.
func Each(t *testing.T, f func(t *testing.T, srv Server)) {
	t.Helper()
	t.Run("dynalite", func(t *testing.T) { f(t, Dynalite(t)) })
	t.Run("minidyn", func(t *testing.T) { f(t, StartMinidyn(t)) })
}

// NewClient returns an SDK client for endpoint and a function that closes
// its idle connections (servers.NewDynamoClient), for a client the test
// closes itself.
func NewClient(endpoint string) (*dynamodb.Client, func()) {
	return servers.NewDynamoClient(endpoint)
}

// Client returns an SDK client for s whose connections are closed when
// the test ends.
func Client(t testing.TB, s Server) *dynamodb.Client {
	t.Helper()
	cli, closeIdle := servers.NewDynamoClient(s.URL)
	t.Cleanup(closeIdle)
	return cli
}

// TableName returns a table name no other test uses: prefix, a dash and
// 12 random hex digits (valid DynamoDB table name characters).
func TableName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// DeleteTable deletes table when the test ends, ignoring a table that is
// already gone.
func DeleteTable(t testing.TB, cli *dynamodb.Client, table string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cli.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
}

// Ctx returns a context that ends after d or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Counter counts the requests an SDK client sends, by operation
// ("GetItem", "UpdateItem", ...). It is safe for concurrent use.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
}

// Get returns the number of requests of operation op so far.
func (c *Counter) Get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// Reset forgets the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = nil
}

// RoundTripFunc is an http.RoundTripper made of a function.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Operation returns the DynamoDB operation of an SDK request ("PutItem").
func Operation(r *http.Request) string {
	target := r.Header.Get("X-Amz-Target")
	return target[strings.LastIndexByte(target, '.')+1:]
}

// ClientWith returns an SDK client for s whose requests go through wrap
// (given the real transport, it returns the one to use: to count requests
// or to inject faults), closed when the test ends.
func ClientWith(t testing.TB, s Server, wrap func(http.RoundTripper) http.RoundTripper) *dynamodb.Client {
	t.Helper()
	tr := servers.NewDynamoTransport()
	t.Cleanup(tr.CloseIdleConnections)
	return servers.DynamoClient(s.URL, wrap(tr))
}

// CountingClient returns an SDK client for s and the Counter of its
// requests.
func CountingClient(t testing.TB, s Server) (*dynamodb.Client, *Counter) {
	t.Helper()
	c := &Counter{}
	cli := ClientWith(t, s, func(next http.RoundTripper) http.RoundTripper {
		return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			c.mu.Lock()
			if c.n == nil {
				c.n = map[string]int{}
			}
			c.n[Operation(r)]++
			c.mu.Unlock()
			return next.RoundTrip(r)
		})
	})
	return cli, c
}
