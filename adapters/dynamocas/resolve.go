package dynamocas

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
)

// maxResends bounds how often a write whose answer was lost is sent again
// while resolving it.
const maxResends = 3

// resolveWrite finds out whether w, whose answer was lost (cause: no
// answer, or a server error), was applied. It reads the key back
// consistently, for up to ResolveTimeout:
//
//   - the item carries w's write id: w applied, and the caller gets its
//     version;
//   - the item still satisfies w's condition: w has not applied (yet).
//     While the caller's context lives, w is sent again, identically: the
//     two sends are conditional on the same state and any write changes
//     that state, so at most one of them applies, and a resend refused by
//     its condition finds w's id if the first send applied meanwhile;
//   - otherwise the key moved on without w's id: w may have applied and
//     been overwritten since (DynamoDB keeps no history to tell), so the
//     caller gets a *cas.AmbiguousError with the key and write id.
func (s *Store) resolveWrite(ctx context.Context, w *write, cause error) (cas.Version, error) {
	amb := &cas.AmbiguousError{Op: w.op, Key: w.key, WriteID: w.id.String(), Err: cause}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	for resends := 0; ; {
		st, err := s.readState(rctx, w.key)
		if err != nil {
			return 0, amb
		}
		if st.hasWID && st.wid == w.id {
			if w.delete {
				return 0, nil
			}
			return st.highest, nil
		}
		if !w.holds(st) || ctx.Err() != nil || resends == maxResends {
			return 0, amb
		}
		resends++
		out, err := s.cli.UpdateItem(ctx, w.in, noSDKRetry)
		if err == nil {
			return s.written(w, out)
		}
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			v, rerr := s.refused(ctx, w, ccf.Item, err)
			if rerr == nil {
				return v, nil // the first send applied
			}
			return 0, amb // refused: by the first send, or by another writer
		}
		if definite(err) && !Retryable(err) {
			// The resend was refused outright (not applied); the first
			// send was not refused by its condition, so it was not refused
			// for this reason: it stays unknown.
			return 0, amb
		}
		amb.Err = errors.Join(cause, err)
		if ctxwait.Sleep(rctx, 50*time.Millisecond) != nil {
			return 0, amb
		}
	}
}
