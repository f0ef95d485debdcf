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

// Reads from the member the client talks to (Config.SerializableReads), on
// a three-member cluster: each process of a service talks to its nearest
// member, reads cost no leader work, and a read that was stale only makes
// the write conflict and retry from the current state. The example starts
// three in-process members and talks to one that is not the leader.
func ExampleConfig_serializableReads() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := servers.StartEtcdCluster(ctx, servers.EtcdOptions{Members: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	leader, err := cluster.AwaitLeader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	follower := cluster.AllEndpoints()[(leader+1)%3] // in an application: the nearest member

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{follower}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	store, err := etcdcas.New(cli, etcdcas.Config{Prefix: "myapp/", SerializableReads: true})
	if err != nil {
		log.Fatal(err)
	}
	counters := cas.NewTyped(store, cas.JSON[int]())
	for range 3 {
		n, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
			return n + 1, nil
		}, occ.WithRetryable(etcdcas.Retryable))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(n)
	}
	// Output:
	// 1
	// 2
	// 3
}
