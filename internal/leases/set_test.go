package leases

import (
	"context"
	"errors"
	"testing"
)

func TestSet(t *testing.T) {
	s := NewSet[int]()
	for i := range 3 {
		if !s.Add(i) {
			t.Fatalf("Add(%d) on an open set refused", i)
		}
	}
	s.Remove(1)
	if s.Closing().Err() != nil {
		t.Fatal("an open set's Closing is done")
	}
	closed := errors.New("closed")
	got := s.Close(closed)
	if len(got) != 2 || got[0]+got[1] != 2 {
		t.Fatalf("Close returned %v, want 0 and 2", got)
	}
	if cause := context.Cause(s.Closing()); cause != closed {
		t.Fatalf("Closing's cause = %v, want %v", cause, closed)
	}
	if s.Add(4) {
		t.Fatal("Add on a closed set recorded the lease")
	}
	s.Remove(0) // no-op
	if got := s.Close(closed); len(got) != 0 {
		t.Fatalf("second Close returned %v", got)
	}
}
