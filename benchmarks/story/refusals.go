package story

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// A write the store refused leaves nothing in the data, so the outcome
// cannot count refusals from the stock as it counts accepted writes from
// the audit list; and a client's own WriteRejected event is only its word
// (a client that skipped a stale write and said "rejected" would look as
// safe as a store that refused it). So the fenced and occ clients' Redis
// connections carry refusalHook, which looks at every reply of the store's
// conditional-write script on the stock, below the client's code, and
// appends each refusal Redis sent to the run's refusal list; judge counts
// stale writes rejected from that list and matches it with the timeline.

// The refusals of rediscas's write script, as Redis replies them.
const (
	refusedFenced   = "fenced"   // a larger fencing token has written the key
	refusedConflict = "conflict" // the expected version is not current
)

// refusalEntry is one refusal, as appended to the refusal list.
type refusalEntry struct {
	Client string `json:"c"`
	// Status is the script's reply: refusedFenced or refusedConflict.
	Status string `json:"s"`
}

// refusedKey is the run's list of refused writes.
func (r *run) refusedKey() string { return r.redisKey("refused") }

// refusalHook records the refusals of conditional writes to one rediscas
// data key (see above).
type refusalHook struct {
	rdb     *redis.Client // where to record: the client's own connection
	client  string
	dataKey string
	list    string
}

func (h refusalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h refusalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h refusalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if st := h.refusal(cmd); st != "" {
			b, _ := json.Marshal(refusalEntry{Client: h.client, Status: st})
			if rerr := h.rdb.RPush(context.WithoutCancel(ctx), h.list, b).Err(); rerr != nil {
				// Unrecorded, the refusal would be missing from the
				// outcome: fail the write instead (judge then finds the
				// run failed, not safe).
				return fmt.Errorf("story: recording the store's refusal: %w", rerr)
			}
		}
		return err
	}
}

// refusal returns the refusal status of cmd when it is a script call
// (EVALSHA or EVAL) whose first key is the data key and whose reply is a
// refusal, or "".
func (h refusalHook) refusal(cmd redis.Cmder) string {
	if cmd.Err() != nil {
		return ""
	}
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return ""
	}
	if args := cmd.Args(); len(args) < 4 || args[3] != h.dataKey {
		return ""
	}
	v, ok := cmd.(interface{ Val() any })
	if !ok {
		return ""
	}
	arr, ok := v.Val().([]any)
	if !ok || len(arr) == 0 {
		return ""
	}
	switch st, _ := arr[0].(string); st {
	case refusedFenced, refusedConflict:
		return st
	}
	return ""
}

// refusals reads the refusal list back.
func (r *run) refusals(ctx context.Context) ([]refusalEntry, error) {
	return readJSONList[refusalEntry](ctx, r.rdb, r.refusedKey(), "refusal")
}
