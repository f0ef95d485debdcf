package rediscas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultDeltaRetention is how long the record of an applied delta is kept
// when Config.DeltaRetention is zero.
const DefaultDeltaRetention = 10 * time.Minute

// addScript is Add. The arithmetic is Lua's where its numbers (doubles)
// are exact, both operands below 10^15, and Redis's own HINCRBY (exact
// 64-bit integers) otherwise; the bounds are compared as decimal text,
// and the delta's record (a string key with a TTL, under the
// store's prefix, so in the data's slot) makes a delta sent again after a
// lost answer report its first outcome instead of applying twice.
//
//	KEYS[1] data hash, KEYS[2] version counter, KEYS[3] the delta's record
//	ARGV[1] n, ARGV[2] lowest and ARGV[3] highest current value accepted,
//	ARGV[4] the write id (16 bytes), ARGV[5] how many bytes of old history
//	to keep, ARGV[6] the record's TTL (ms), ARGV[7] "1" on a send made
//	again after a lost answer, else ""
//
// The record is looked up on every send, the first included: a first send
// whose connection broke can still reach the server after the send that
// resolved it (held up in a proxy or a kernel buffer), and must then find
// the record rather than apply the delta a second time. A send made again
// that is refused records the refusal too ("!b" or "!n"), so that such a
// first send, reaching the server after the value moved, finds it instead
// of applying the delta its caller was told was refused.
//
// Replies: {"ok", version, value} | {"done", version, value} |
// {"bound", value or ""} | {"notint", value} | {"held", version or "0", value} |
// {"refused", "b" or "n"} (the record of a refusal).
const addSrc = findSrc + `
local function cmp(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then
    if na then return -1 end
    return 1
  end
  if a == b then return 0 end
  local r = 1
  if #a < #b or (#a == #b and a < b) then r = -1 end
  if na then return -r end
  return r
end
local function be8(n)
  local s = ''
  for i = 1, 8 do
    s = string.char(n % 256) .. s
    n = math.floor(n / 256)
  end
  return s
end
local done = redis.call('GET', KEYS[3])
if done then
  if string.sub(done, 1, 1) == '!' then return {'refused', string.sub(done, 2)} end
  local sep = string.find(done, ':', 1, true)
  return {'done', string.sub(done, 1, sep - 1), string.sub(done, sep + 1)}
end
local h = KEYS[1]
local st = redis.call('HMGET', h, 'v', 'n', 'h', 'x', 'xe')
if held(st[4], st[5], '') then return {'held', st[2] or '0', st[1] or ''} end
local cur = st[1] or '0'
if #cur > 20 or not (cur == '0' or string.match(cur, '^%-?[1-9]%d*$')) then
  if ARGV[7] == '1' then redis.call('SET', KEYS[3], '!n', 'PX', ARGV[6]) end
  return {'notint', cur}
end
if cmp(cur, ARGV[2]) < 0 or cmp(cur, ARGV[3]) > 0 then
  if ARGV[7] == '1' then redis.call('SET', KEYS[3], '!b', 'PX', ARGV[6]) end
  return {'bound', st[1] or ''}
end
local hist = ARGV[4] .. be8(tonumber(st[2] or '0')) .. string.sub(st[3] or '', 1, tonumber(ARGV[5]))
local ver = nextVersion(KEYS[2])
local v
if #cur <= 15 and #ARGV[1] <= 15 then
  -- Below 2^53 Lua's numbers are exact: one HSET.
  v = string.format('%d', tonumber(cur) + tonumber(ARGV[1]))
  redis.call('HSET', h, 'v', v, 'n', ver, 'h', hist)
else
  redis.call('HINCRBY', h, 'v', ARGV[1])
  v = redis.call('HGET', h, 'v')
  redis.call('HSET', h, 'n', ver, 'h', hist)
end
if not st[1] then redis.call('PERSIST', h) end
redis.call('SET', KEYS[3], ver .. ':' .. v, 'PX', ARGV[6])
return {'ok', ver, v}
`

var addScript = newScript(addSrc)

// Add implements cas.Adder with one script: Redis adds n to the value
// (HINCRBY) when the current value lies within the bounds, gives the key a
// new version from the store's counter, records the write in the key's
// history, and keeps a record of the delta under its write id for
// Config.DeltaRetention. When the answer is lost, Add sends the delta
// again (for up to Config.ResolveTimeout): the record makes the script
// report the first outcome instead of applying the delta twice. Only when
// no answer comes does Add return a *cas.AmbiguousError. While an
// exclusive update holds the key, the delta waits for it, as plain writes
// do.
func (s *Store) Add(ctx context.Context, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	lo, hi, err := s.limits.Add(ctx, key, n, b)
	if err != nil {
		return 0, 0, err
	}
	id := s.ids.Next()
	dk := s.dataKey(key)
	keys := []string{dk, s.counterOf(dk), s.deltaKey(id, dk)}
	args := []any{n, lo, hi, string(id[:]), s.keep, s.deltaTTL, ""}
	type result struct {
		v   int64
		ver cas.Version
	}
	send := func(ctx context.Context) (result, error) {
		res, err := s.run(ctx, addScript, keys, args...)
		rep := replication(err)
		if err != nil && rep == nil {
			return result{}, s.noticeFailure(ctx, err)
		}
		r, err := parseReply(res)
		if err != nil {
			return result{}, err
		}
		switch r.status {
		case "ok", "done":
			ver, err := parseVersion(r.field(0))
			if err != nil {
				return result{}, err
			}
			v, err := strconv.ParseInt(r.field(1), 10, 64)
			if err != nil {
				return result{}, fmt.Errorf("rediscas: bad value %q in reply: %w", r.field(1), err)
			}
			if rep != nil {
				// Applied, but a failover could still lose it.
				return result{}, &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.String(), Err: rep}
			}
			return result{v, cas.Version(ver)}, nil
		case "bound":
			be := &cas.BoundError{Key: key, Add: n, Bounds: b, HasCurrent: true}
			if r.field(0) != "" {
				cur, err := cas.ParseInt(key, []byte(r.field(0)))
				if err != nil {
					return result{}, err
				}
				be.Current = cur
			}
			return result{}, be
		case "notint":
			_, err := cas.ParseInt(key, []byte(r.field(0)))
			if err == nil {
				err = &cas.KeyError{Op: "add", Key: key, Err: fmt.Errorf("%w: %q", cas.ErrNotInteger, r.field(0))}
			}
			return result{}, err
		case "held":
			return result{}, errHeld
		case "refused":
			// A send of this delta made again after a lost answer was
			// refused before this one came (its answer lost too).
			return result{}, cas.RefusedOnResend(key, n, b, r.field(0) == "n")
		}
		return result{}, fmt.Errorf("rediscas: unexpected script reply %q", r.status)
	}
	out, err := ctxwait.WhileHeld(ctx, errHeld, func() (result, error) { return send(ctx) })
	if errors.Is(err, cas.ErrAmbiguous) {
		return 0, 0, err
	}
	if err == nil || !mayHaveApplied(err) || isAnswer(err) {
		if err != nil && !isAnswer(err) {
			return 0, 0, &cas.KeyError{Op: "add", Key: key, Err: wrapErr(err)}
		}
		return out.v, out.ver, err
	}
	// The answer was lost: send the delta again under the same id until
	// one comes back; its record may exist now.
	amb := &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.String(), Err: err}
	if ctx.Err() != nil {
		return 0, 0, amb
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	args[len(args)-1] = "1" // a refusal from now on is recorded
	wait := 10 * time.Millisecond
	for {
		out, rerr := ctxwait.WhileHeld(rctx, errHeld, func() (result, error) { return send(rctx) })
		if rerr == nil || isAnswer(rerr) || errors.Is(rerr, cas.ErrAmbiguous) {
			return out.v, out.ver, rerr
		}
		if !mayHaveApplied(rerr) && !Retryable(rerr) {
			return 0, 0, amb
		}
		if ctxwait.Sleep(rctx, wait) != nil {
			return 0, 0, amb
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// isAnswer reports whether err is the script's own answer (a bound crossed,
// a value that is not an integer) rather than a failure to get one.
func isAnswer(err error) bool {
	return errors.Is(err, cas.ErrBound) || errors.Is(err, cas.ErrNotInteger)
}

// deltaKey is the key of a delta's record, in the slot of the data hash
// dataKey when the store spreads its keys over a cluster's slots (the
// slot's tag comes before the write id, whose raw bytes may hold braces).
func (s *Store) deltaKey(id writeid.ID, dataKey string) string {
	if s.perSlot {
		return s.deltas + slotTags()[hashSlot(dataKey)] + string(id[:])
	}
	return s.deltas + string(id[:])
}
