package etcdcas_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/servers"
	"github.com/occkit/occkit/occ"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// exampleEtcd starts an in-process etcd server, as the tests do, and
// returns its client endpoints and a function that stops it.
func exampleEtcd() (endpoints []string, stop func()) {
	c, err := servers.StartEtcdCluster(context.Background(), servers.EtcdOptions{})
	if err != nil {
		log.Fatal(err)
	}
	return c.AllEndpoints(), c.Close
}

// An optimistic counter on etcd, where concurrency.STM would retry forever
// on a hidden goroutine. The example runs on an in-process etcd server.
func Example() {
	endpoints, stop := exampleEtcd() // in an application: your cluster's endpoints
	defer stop()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	store, err := etcdcas.New(cli, etcdcas.Config{Prefix: "myapp/"})
	if err != nil {
		log.Fatal(err)
	}
	counters := cas.NewTyped(store, cas.JSON[int]())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, version, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
		return n + 1, nil
	}, occ.WithRetryable(etcdcas.Retryable))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, version)
	// Output: 1 2
}
