package servers

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	miniserver "github.com/truora/minidyn/server"
)

// EnvDynaliteURL is the environment variable holding the URL of dynalite
// (a DynamoDB-compatible server, scripts/servers/dynalite.sh).
const EnvDynaliteURL = "OCCKIT_DYNALITE_URL"

// DynamoRegion is the region the clients sign for. Local servers accept
// any.
const DynamoRegion = "us-east-1"

// Minidyn is minidyn's DynamoDB-compatible HTTP server
// (github.com/truora/minidyn/server), running in this process on a free
// 127.0.0.1 port. It keeps its tables in memory and implements
// TransactWriteItems. The server serves requests concurrently; Close is
// to be called once.
type Minidyn struct {
	// URL is the server's http://127.0.0.1:port endpoint.
	URL string
	srv *httptest.Server
}

// StartMinidyn starts a minidyn server with no tables.
func StartMinidyn() *Minidyn {
	srv := httptest.NewServer(&serialTables{h: miniserver.NewServer()})
	return &Minidyn{URL: srv.URL, srv: srv}
}

// Close stops the server, closing its connections.
func (m *Minidyn) Close() {
	m.srv.CloseClientConnections()
	m.srv.Close()
}

// serialTables runs minidyn's table requests (CreateTable, DeleteTable,
// UpdateTable, DescribeTable), which change or read its map of tables
// without its lock, one at a time and apart from every other request;
// item requests run side by side (minidyn serialises them under its own
// lock).
type serialTables struct {
	mu sync.RWMutex
	h  http.Handler
}

func (s *serialTables) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), "Table") {
		s.mu.Lock()
		defer s.mu.Unlock()
	} else {
		s.mu.RLock()
		defer s.mu.RUnlock()
	}
	s.h.ServeHTTP(w, r)
}

// NewDynamoClient returns an SDK client for endpoint (static credentials, region
// us-east-1, BaseEndpoint) over its own HTTP transport, and a function
// that closes the transport's idle connections. It is for tools and
// benchmarks that outlive a test; tests use internal/dynamotest.Client.
func NewDynamoClient(endpoint string) (*dynamodb.Client, func()) {
	tr := NewDynamoTransport()
	return DynamoClient(endpoint, tr), tr.CloseIdleConnections
}

// NewDynamoTransport returns the HTTP transport of NewDynamoClient: no
// HTTP proxy, 5 s dial timeout, up to 256 idle connections.
func NewDynamoTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil, // loopback servers: never through a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
}

// DynamoClient returns an SDK client for endpoint (static credentials,
// region us-east-1, BaseEndpoint) over rt.
func DynamoClient(endpoint string, rt http.RoundTripper) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       DynamoRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("occkit", "occkit-secret", ""),
		HTTPClient:   &http.Client{Transport: rt},
	})
}
