package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/occkit/occkit/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// EnvClusterURL is the environment variable holding the test Redis
// Cluster's URL, in the form redis.ParseClusterURL reads
// (redis://host:port?addr=host2:port2&addr=...).
const EnvClusterURL = "OCCKIT_REDIS_CLUSTER_URL"

// ClusterURL returns the test cluster's URL from OCCKIT_REDIS_CLUSTER_URL,
// or fails the test.
func ClusterURL(t testing.TB) string {
	t.Helper()
	return testenv.Server{Env: EnvClusterURL, What: "a Redis Cluster", Script: "redis-cluster.sh"}.Lookup(t)
}

// ClusterOptions returns client options for the cluster at url.
func ClusterOptions(t testing.TB, url string) *redis.ClusterOptions {
	t.Helper()
	opt, err := redis.ParseClusterURL(url)
	if err != nil {
		t.Fatalf("redistest: parse cluster URL %q: %v", url, err)
	}
	return opt
}

// ClusterClient returns a client of the test cluster (or of the cluster
// at url, when one is given), after letting each configure function
// adjust its options; it checks that every master answers and closes the
// client when the test ends.
func ClusterClient(t testing.TB, url string, configure ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	if url == "" {
		url = ClusterURL(t)
	}
	opt := ClusterOptions(t, url)
	for _, f := range configure {
		f(opt)
	}
	cli := redis.NewClusterClient(opt)
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cli.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("redistest: ping the masters of %s: %v", url, err)
	}
	return cli
}

// ClusterPrefix returns a key prefix no other test uses, without a hash
// tag (its keys spread over the cluster's slots), and deletes every key
// under it on every master when the test ends.
func ClusterPrefix(t testing.TB, cli *redis.ClusterClient) string {
	t.Helper()
	p := newPrefix()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := cli.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, p+"*", 1000).Iterator()
			for iter.Next(ctx) {
				// One key a command: keys of one master are in many slots.
				if err := m.Unlink(ctx, iter.Val()).Err(); err != nil {
					return err
				}
			}
			return iter.Err()
		})
		if err != nil {
			t.Errorf("redistest: deleting keys under %q: %v", p, err)
		}
	})
	return p
}
