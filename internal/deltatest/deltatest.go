// Package deltatest holds the check the adapters' delta fault tests share:
// a delta whose first send was held up on its way, and whose send made
// again was refused, must apply nothing when that first send finally
// reaches the server, even though the value has moved where its bound
// would let it through.
package deltatest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
)

// WantLateSendAppliesNothing ends such a test, once the send made again
// was refused: it adds n to key through s and expects the value want,
// calls release to let the held-up first send reach the server, and then
// expects key to hold want still. release must return only once the
// server has answered the released send (pgtest.Faults.Release and
// connfault.Marker.Release do), so that the Get sees whatever it did.
func WantLateSendAppliesNothing(t testing.TB, s cas.Adder, key string, n, want int64, release func(timeout time.Duration) error) {
	t.Helper()
	ctx := context.Background()
	if v, _, err := s.Add(ctx, key, n, cas.Bounds{}); err != nil || v != want {
		t.Fatalf("add %d: %d, %v", n, v, err)
	}
	if err := release(5 * time.Second); err != nil {
		t.Fatalf("releasing the held-up first send: %v", err)
	}
	it, err := s.Get(ctx, key)
	if err != nil || string(it.Value) != strconv.FormatInt(want, 10) {
		t.Fatalf("%s = %q, %v; want %d: the refused delta was applied by its late first send", key, it.Value, err, want)
	}
}
