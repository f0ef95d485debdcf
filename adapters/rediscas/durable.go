package rediscas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultWaitTimeout is Config.WaitTimeout's default.
const DefaultWaitTimeout = time.Second

// ReplicationError reports a write that the server applied but that fewer
// than Config.WaitReplicas replicas acknowledged within Config.WaitTimeout
// (or whose WAIT failed): a failover now could lose it. The caller gets it
// inside a *cas.AmbiguousError (errors.Is(err, cas.ErrAmbiguous)), since
// whether the write survives is not known; errors.As finds it there.
type ReplicationError struct {
	Want, Acked int           // replicas asked for and acknowledged
	Timeout     time.Duration // how long the server waited
	Err         error         // WAIT's own failure, if it failed
}

func (e *ReplicationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("rediscas: write applied, waiting for %d replicas failed: %v", e.Want, e.Err)
	}
	return fmt.Sprintf("rediscas: write applied but acknowledged by %d of %d replicas within %v", e.Acked, e.Want, e.Timeout)
}

func (e *ReplicationError) Unwrap() error { return e.Err }

// run runs a write script sc over keys (keys[0] is the data hash, or the
// counter, of the slot the script runs in), sending it at most once. With
// Config.WaitReplicas set it sends, in one pipeline on the connection of
// the slot's master, the script, a no-op write of the slot's version
// counter (INCRBY 0: it is replicated whatever the script did, so its
// acknowledgement covers every earlier write of that master, the
// script's included, even when the script found its write already done)
// and WAIT; when fewer replicas than asked acknowledged, it returns the
// script's answer with a *ReplicationError.
func (s *Store) run(ctx context.Context, sc *script, keys []string, args ...any) (any, error) {
	if s.waitReplicas == 0 {
		return runOnce(ctx, s.cli, sc, keys, args...)
	}
	counter := s.counterOf(keys[0]) // keys[0]'s own when it is the counter
	const maxRedirects = 3
	name, body := "evalsha", sc.sha.Hash()
	for attempt := 0; ; attempt++ {
		node, err := s.master(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		cmd := evalCmd(ctx, name, body, keys, args)
		var wait *redis.IntCmd
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			_ = p.Process(ctx, onceCmd{cmd})
			p.IncrBy(ctx, counter, 0)
			wait = redis.NewIntCmd(ctx, "wait", s.waitReplicas, s.waitTimeout.Milliseconds())
			_ = p.Process(ctx, wait)
			return nil
		})
		err = cmd.Err()
		switch {
		case redis.HasErrorPrefix(err, "NOSCRIPT") && name == "evalsha":
			name, body = "eval", sc.src
			continue
		case (redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ")) && attempt < maxRedirects:
			// The slot moved (a failover, a resharding): the script did not
			// run. Learn where it lives now and send it there.
			if cc, ok := s.cli.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx)
			}
			continue
		case err != nil:
			return nil, s.noticeFailure(ctx, err)
		}
		res := cmd.Val()
		switch n, werr := wait.Result(); {
		case werr != nil:
			return res, &ReplicationError{Want: s.waitReplicas, Timeout: s.waitTimeout, Err: werr}
		case int(n) < s.waitReplicas:
			return res, &ReplicationError{Want: s.waitReplicas, Acked: int(n), Timeout: s.waitTimeout}
		}
		return res, nil
	}
}

// master returns a client of the server that serves key's slot: the
// store's own client for one server, the slot's master for a cluster.
func (s *Store) master(ctx context.Context, key string) (redis.Cmdable, error) {
	if cc, ok := s.cli.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("rediscas: finding the master of %q: %w", key, err)
		}
		return node, nil
	}
	return s.cli, nil
}

// replication returns the *ReplicationError in err, if any.
func replication(err error) *ReplicationError {
	var re *ReplicationError
	if errors.As(err, &re) {
		return re
	}
	return nil
}
