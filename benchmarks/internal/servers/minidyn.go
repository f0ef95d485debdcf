package servers

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	miniserver "github.com/truora/minidyn/server"
)

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
// lock). internal/dynamotest guards its test servers the same way.
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
