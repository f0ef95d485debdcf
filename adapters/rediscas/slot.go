package rediscas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// ErrCrossSlot reports a commit whose keys live in different hash slots of
// a Redis Cluster: Redis runs a script on one node, over keys of one slot,
// so such a commit cannot be atomic. It is refused before anything is
// sent. Give the keys of one commit a common hash tag ("{order:7}:head",
// "{order:7}:line:1") to put them in one slot.
var ErrCrossSlot = errors.New("rediscas: keys of one commit are in different hash slots")

// CrossSlotError is the error of a commit refused with ErrCrossSlot: two
// of its keys and their slots. errors.Is(err, ErrCrossSlot) is true.
type CrossSlotError struct {
	Op        string // "commit" or "exclusive commit"
	Key       string // the commit's first key
	Slot      int    // its hash slot
	Other     string // a key of the commit in another slot
	OtherSlot int    // that key's slot
}

func (e *CrossSlotError) Error() string {
	return fmt.Sprintf("rediscas: %s: key %q is in hash slot %d and key %q in slot %d: "+
		"a Redis Cluster commits keys of one slot only (give them a common hash tag, such as \"{order:7}:...\")",
		e.Op, e.Key, e.Slot, e.Other, e.OtherSlot)
}

// Is makes errors.Is(err, ErrCrossSlot) true.
func (e *CrossSlotError) Is(target error) bool { return target == ErrCrossSlot }

// hashSlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag (the bytes between the first "{" and the first "}" after
// it, when there are any) or of the whole key, modulo 16384.
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % slotCount)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTags returns, for every hash slot, a short hash tag ("{…}") that
// hashes to it: appended to a key without a tag of its own, it puts that
// key in the slot. The table is computed once, by trying short decimal
// strings until every slot has one (about 160,000 checksums, a few
// milliseconds).
var slotTags = sync.OnceValue(func() *[slotCount]string {
	var tags [slotCount]string
	left := slotCount
	for n := 0; left > 0; n++ {
		s := strconv.Itoa(n)
		slot := crc16(s) % slotCount
		if tags[slot] == "" {
			tags[slot] = "{" + s + "}"
			left--
		}
	}
	return &tags
})

// checkSlots refuses, with a *CrossSlotError, keys (user keys) whose data
// hashes are not all in one slot, when the store spreads its keys over
// slots; otherwise every key of the store shares one slot or one server.
func (s *Store) checkSlots(op string, keys []string) error {
	if !s.perSlot || len(keys) < 2 {
		return nil
	}
	first := hashSlot(s.dataKey(keys[0]))
	for _, k := range keys[1:] {
		if slot := hashSlot(s.dataKey(k)); slot != first {
			return &CrossSlotError{Op: op, Key: keys[0], Slot: first, Other: k, OtherSlot: slot}
		}
	}
	return nil
}

// counterOf returns the version counter that serves the data hash
// dataKey: the store's one counter, or, when the store spreads its keys
// over a cluster's slots, the counter of dataKey's slot (the prefix, then
// "version", then the slot's tag), so that a script touches keys of one
// slot only.
func (s *Store) counterOf(dataKey string) string {
	if !s.perSlot {
		return s.counter
	}
	return s.counter + slotTags()[hashSlot(dataKey)]
}

// noticeFailure makes a cluster client look up the cluster's slots again
// when err says a node did not answer (not a reply of the server): after
// a failover the dead master's slots are served by a promoted replica,
// which go-redis otherwise learns of only from a MOVED reply or after
// ClusterOptions.ClusterStateReloadInterval (default 1 min). It returns
// err.
func (s *Store) noticeFailure(ctx context.Context, err error) error {
	cc, ok := s.cli.(*redis.ClusterClient)
	if !ok || err == nil || ctx.Err() != nil {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !transientReply(err) {
		return err
	}
	cc.ReloadState(ctx)
	return err
}
