package etcdcas_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An optimistic counter on etcd, where concurrency.STM would retry forever
// on a hidden goroutine. The endpoints come from ETCD_ENDPOINTS (comma
// separated); this example is compiled, not run, by go test.
func Example() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","),
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
}
