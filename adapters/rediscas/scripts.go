package rediscas

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The store's hash fields. A key is live while its hash has "v"; a hash
// without "v" is a tombstone, invisible to Get.
//
//	v  the value (live keys only)
//	n  the version (live keys only)
//	h  the history: the key's last Config.History writes (puts and
//	   deletes), newest first, 24 bytes each: the write id (16 bytes) and
//	   the version the write replaced (8 bytes, big-endian; 0: a create)
//	f  the largest fencing token that wrote the key, 20 digits (never removed)
//	x  the token of an exclusive update holding the key (UpdateExclusive)
//	xe when that hold ends, in the server's milliseconds (TIME)
//
// While a hold is live, every write of the key but the holder's (the one
// carrying its token) is refused as "held".
// Every write first looks for its own write id in the history: a write sent
// twice (the first answer was lost) reports the first one's outcome instead
// of a conflict with itself. Versions never depend on it: the version check
// alone keeps a write from applying twice, since the version it expects is
// gone for good once it applied. A version is replaced by exactly one
// write, and the history names it, which tells whether a write whose answer
// was lost applied (see failedWrite).
//
// The scripts search the history with findSrc, which returns from the
// script when it finds the write id it is given, and take versions with
// its nextVersion: the counter plus one, and at least the server's clock
// in microseconds. The clock is what keeps a version from being handed out
// twice across a failover: the promoted replica's counter lacks the
// increments of writes it never received, and its clock has gone past
// every version those writes took, unless the counter had run ahead of
// the clock by more than the failover took (a clock stepped back, a
// master whose clock ran fast) or two masters took writes at once.
// Without it, a write that read a state the failover undid could expect
// that state's version, find it given again to another state of the key,
// and overwrite that state unseen.
const findSrc = `
local function nextVersion(counter)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if tonumber(redis.call('GET', counter) or '0') < floor then
    local v = string.format('%d', floor)
    redis.call('SET', counter, v)
    return v
  end
  redis.call('INCR', counter)
  return redis.call('GET', counter)
end
local function find(hist, id, put, n)
  for i = 0, math.floor(#hist / 24) - 1 do
    if string.sub(hist, i * 24 + 1, i * 24 + 16) == id then
      if not put then return {'ok', '0'} end
      if i == 0 then return {'ok', n} end
      return {'okraw', string.sub(hist, i * 24 - 7, i * 24)}
    end
  end
  return nil
end
local function held(x, xe, mine)
  if not x or x == mine then return false end
  local t = redis.call('TIME')
  return tonumber(xe) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// putScript is CompareAndSwap and CompareAndSwapFenced.
//
//	KEYS[1] data hash, KEYS[2] version counter
//	ARGV[1] expected version, ARGV[2] value, ARGV[3] this write's history
//	entry, ARGV[4] fencing token (20 digits) or "" for a plain write,
//	ARGV[5] how many bytes of the old history to keep, ARGV[6] the token
//	of the exclusive update writing (its hold ends with the write) or ""
//
// Replies: {"ok", version} | {"okraw", version as 8 bytes} |
// {"fenced", highest} | {"conflict", "0"} | {"conflict", version, value} |
// {"held", version or "0", value}.
const putSrc = findSrc + `
local h = KEYS[1]
local st = redis.call('HMGET', h, 'v', 'n', 'h', 'f', 'x', 'xe')
local hist = st[3] or ''
local done = find(hist, string.sub(ARGV[3], 1, 16), true, st[2])
if done then return done end
if held(st[5], st[6], ARGV[6]) then return {'held', st[2] or '0', st[1] or ''} end
if ARGV[4] ~= '' and st[4] and st[4] > ARGV[4] then
  return {'fenced', st[4]}
end
if not st[1] then
  if ARGV[1] ~= '0' then return {'conflict', '0'} end
elseif st[2] ~= ARGV[1] then
  return {'conflict', st[2], st[1]}
end
local ver = nextVersion(KEYS[2])
hist = ARGV[3] .. string.sub(hist, 1, tonumber(ARGV[5]))
if ARGV[4] ~= '' then
  redis.call('HSET', h, 'v', ARGV[2], 'n', ver, 'h', hist, 'f', ARGV[4])
else
  redis.call('HSET', h, 'v', ARGV[2], 'n', ver, 'h', hist)
end
if st[5] then redis.call('HDEL', h, 'x', 'xe') end
redis.call('PERSIST', h)
return {'ok', ver}
`

// deleteScript is CompareAndDelete. The hash stays as a tombstone holding
// the history (and the fence, if any); a tombstone without a fence expires
// after ARGV[3] milliseconds.
//
//	KEYS[1] data hash
//	ARGV[1] expected version, ARGV[2] this write's history entry,
//	ARGV[3] tombstone TTL (ms), ARGV[4] how many bytes of the old history
//	to keep
//
// Replies: {"ok", "0"} | {"conflict", "0"} | {"conflict", version, value} |
// {"held", version or "0", value}.
const deleteSrc = findSrc + `
local h = KEYS[1]
local st = redis.call('HMGET', h, 'v', 'n', 'h', 'f', 'x', 'xe')
local hist = st[3] or ''
local done = find(hist, string.sub(ARGV[2], 1, 16), false, st[2])
if done then return done end
if held(st[5], st[6], '') then return {'held', st[2] or '0', st[1] or ''} end
if not st[1] then
  return {'conflict', '0'}
end
if st[2] ~= ARGV[1] then
  return {'conflict', st[2], st[1]}
end
redis.call('HDEL', h, 'v', 'n')
redis.call('HSET', h, 'h', ARGV[2] .. string.sub(hist, 1, tonumber(ARGV[4])))
if not st[4] then
  redis.call('PEXPIRE', h, ARGV[3])
end
return {'ok', '0'}
`

// commitScript is Commit: every version is checked before anything is
// written, so a failed check writes nothing. All puts get one version.
//
//	KEYS[1] version counter, KEYS[1+i] the data hash of op i
//	ARGV[1] write id, ARGV[2] tombstone TTL (ms), ARGV[3] index of the op
//	whose history is searched for the write id (the first put, else the
//	first delete, else 0), ARGV[4] how many bytes of old history to keep,
//	ARGV[5] the token of the exclusive commit writing (its holds let it
//	through, and its writes end them) or "", then four per op: kind ("c",
//	"p", "d"), expected version, expected version as 8 bytes, value
//
// Replies: {"ok", version of the puts} | {"okraw", the same as 8 bytes} |
// {"conflict", op index, "0"} | {"conflict", op index, version, value}.
const commitSrc = findSrc + `
local id, ttl, marker, keep, mine = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local nops = #KEYS - 1
if marker > 0 then
  local st = redis.call('HMGET', KEYS[marker + 1], 'n', 'h')
  local done = find(st[2] or '', id, ARGV[6 + (marker - 1) * 4] == 'p', st[1])
  if done then return done end
end
local state = {}
for i = 1, nops do
  local a = 6 + (i - 1) * 4
  local st = redis.call('HMGET', KEYS[i + 1], 'v', 'n', 'h', 'f', 'x', 'xe')
  if held(st[5], st[6], mine) then return {'conflict', tostring(i), st[2] or '0', st[1] or ''} end
  if not st[1] then
    if ARGV[a + 1] ~= '0' then return {'conflict', tostring(i), '0'} end
  elseif st[2] ~= ARGV[a + 1] then
    return {'conflict', tostring(i), st[2], st[1]}
  end
  state[i] = st
end
local ver = '0'
if marker > 0 and ARGV[6 + (marker - 1) * 4] == 'p' then
  ver = nextVersion(KEYS[1])
end
for i = 1, nops do
  local a = 6 + (i - 1) * 4
  local h = KEYS[i + 1]
  local hist = id .. ARGV[a + 2] .. string.sub(state[i][3] or '', 1, keep)
  if ARGV[a] == 'p' then
    redis.call('HSET', h, 'v', ARGV[a + 3], 'n', ver, 'h', hist)
    redis.call('PERSIST', h)
  elseif ARGV[a] == 'd' then
    redis.call('HDEL', h, 'v', 'n')
    redis.call('HSET', h, 'h', hist)
    if not state[i][4] then redis.call('PEXPIRE', h, ttl) end
  end
  if ARGV[a] ~= 'c' and mine ~= '' and state[i][5] == mine then
    redis.call('HDEL', h, 'x', 'xe')
  end
end
return {'ok', ver}
`

// holdScript is UpdateExclusive's hold: it takes the key for ARGV[2] ms
// unless an exclusive update with another token holds it, and returns the
// key's state. A key that did not exist gets a hash that expires with the
// hold unless a write keeps it.
//
//	KEYS[1] data hash
//	ARGV[1] the hold's token, ARGV[2] how long it lasts (ms)
//
// Replies: {"ok", "0"} | {"ok", version, value} | {"held", ms left}.
const holdSrc = findSrc + `
local h = KEYS[1]
local st = redis.call('HMGET', h, 'v', 'n', 'x', 'xe')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if st[3] and st[3] ~= ARGV[1] and tonumber(st[4]) > now then
  return {'held', tostring(tonumber(st[4]) - now)}
end
local fresh = redis.call('EXISTS', h) == 0
redis.call('HSET', h, 'x', ARGV[1], 'xe', tostring(now + tonumber(ARGV[2])))
if fresh then redis.call('PEXPIRE', h, tonumber(ARGV[2]) * 2) end
if not st[1] then return {'ok', '0'} end
return {'ok', st[2], st[1]}
`

// unholdScript ends the hold with token ARGV[1] of KEYS[1], if it is
// still that hold.
const unholdSrc = `
if redis.call('HGET', KEYS[1], 'x') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'x', 'xe')
end
return {'ok'}
`

var (
	holdScript   = newScript(holdSrc)
	unholdScript = newScript(unholdSrc)
	putScript    = newScript(putSrc)
	deleteScript = newScript(deleteSrc)
	commitScript = newScript(commitSrc)
)

// script is a Lua script run with EVALSHA, falling back to EVAL when the
// server does not have it cached (a restart, a failover, SCRIPT FLUSH).
type script struct {
	src string
	sha *redis.Script // only its SHA-1 is used
}

func newScript(src string) *script { return &script{src: src, sha: redis.NewScript(src)} }

// onceCmd is a command the client must send at most once: go-redis re-sends
// a command whose connection broke after sending (Options.MaxRetries), and
// a write sent again after it applied would report a conflict with itself
// if another writer came in between. The store resolves lost answers
// itself (see failedWrite), knowing that the first request may have applied.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to re-send the command once it may have
// reached the server (it still redirects MOVED and ASK, which did not run).
func (onceCmd) NoRetry() bool { return true }

// runOnce runs sc with keys and args, sending it at most once (EVALSHA, and
// EVAL only when the server answered NOSCRIPT, which ran nothing).
func runOnce(ctx context.Context, cli redis.UniversalClient, sc *script, keys []string, args ...any) (any, error) {
	cmd := evalCmd(ctx, "evalsha", sc.sha.Hash(), keys, args)
	_ = cli.Process(ctx, onceCmd{cmd})
	if err := cmd.Err(); redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = evalCmd(ctx, "eval", sc.src, keys, args)
		_ = cli.Process(ctx, onceCmd{cmd})
	}
	return cmd.Val(), cmd.Err()
}

func evalCmd(ctx context.Context, name, body string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // routes the command by its first key in a cluster
	}
	return cmd
}

// reply is a script's answer: a status and strings.
type reply struct {
	status string
	fields []string
}

func parseReply(v any) (reply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return reply{}, fmt.Errorf("rediscas: unexpected script reply %T %v", v, v)
	}
	r := reply{fields: make([]string, 0, len(arr)-1)}
	for i, x := range arr {
		s, ok := x.(string)
		if !ok {
			return reply{}, fmt.Errorf("rediscas: unexpected script reply element %T %v", x, x)
		}
		if i == 0 {
			r.status = s
		} else {
			r.fields = append(r.fields, s)
		}
	}
	if r.status == "okraw" { // a version from the history, 8 bytes
		if len(r.fields) != 1 || len(r.fields[0]) != 8 {
			return reply{}, fmt.Errorf("rediscas: unexpected script reply %q %q", r.status, r.fields)
		}
		r.status, r.fields[0] = "ok", strconv.FormatUint(binary.BigEndian.Uint64([]byte(r.fields[0])), 10)
	}
	return r, nil
}

// field returns the i-th field, or "" when there is none.
func (r reply) field(i int) string {
	if i < len(r.fields) {
		return r.fields[i]
	}
	return ""
}

func parseVersion(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("rediscas: bad version %q in reply: %w", s, err)
	}
	return v, nil
}
