package rediscas

import "testing"

// TestSlotTags checks that the tag chosen for every slot hashes to it, and
// that a tag appended to a key without one moves the key there.
func TestSlotTags(t *testing.T) {
	tags := slotTags()
	for slot, tag := range tags {
		if got := hashSlot(tag); got != slot {
			t.Fatalf("tag %q of slot %d hashes to %d", tag, slot, got)
		}
		if got := hashSlot("occkit:version" + tag); got != slot {
			t.Fatalf("the counter of slot %d hashes to %d", slot, got)
		}
	}
}

// TestCRC16 checks the checksum against the check value of CRC-16/XMODEM
// and the example of the Redis Cluster specification.
func TestCRC16(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
}
