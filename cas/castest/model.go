package castest

import (
	"context"
	"errors"
	"fmt"

	"github.com/anishathalye/porcupine"
	"github.com/occkit/occkit/cas"
)

// OpKind is the kind of a recorded operation.
type OpKind uint8

// Recorded operation kinds.
const (
	OpGet OpKind = iota
	OpSwap
	OpDelete
)

// Input is a recorded call: Get(Key), CompareAndSwap(Key, Expected, Value)
// or CompareAndDelete(Key, Expected).
type Input struct {
	Kind     OpKind
	Key      string
	Expected cas.Version
	Value    string
}

// String describes the call.
func (in Input) String() string {
	switch in.Kind {
	case OpGet:
		return fmt.Sprintf("get(%s)", in.Key)
	case OpSwap:
		return fmt.Sprintf("cas(%s, v%d, %q)", in.Key, in.Expected, in.Value)
	}
	return fmt.Sprintf("delete(%s, v%d)", in.Key, in.Expected)
}

// Output is a recorded result. For a Get, Version 0 means not found. A
// conflict records the current version (and value) when the store
// returned it.
type Output struct {
	Version      cas.Version
	Value        string
	Conflict     bool
	HasCurrent   bool
	Current      cas.Version
	CurrentValue string
	Err          error
}

// String describes the result.
func (out Output) String() string {
	switch {
	case out.Err != nil:
		return "error: " + out.Err.Error()
	case out.Conflict && out.HasCurrent:
		return fmt.Sprintf("conflict (current v%d %q)", out.Current, out.CurrentValue)
	case out.Conflict:
		return "conflict"
	}
	return fmt.Sprintf("v%d %q", out.Version, out.Value)
}

// Apply performs in on s and records the result.
func Apply(ctx context.Context, s cas.Store, in Input) Output {
	var out Output
	var err error
	switch in.Kind {
	case OpGet:
		var it cas.Item
		it, err = s.Get(ctx, in.Key)
		if errors.Is(err, cas.ErrNotFound) {
			return out
		}
		out.Version, out.Value = it.Version, string(it.Value)
	case OpSwap:
		out.Version, err = s.CompareAndSwap(ctx, in.Key, in.Expected, []byte(in.Value))
		out.Value = in.Value
	case OpDelete:
		err = s.CompareAndDelete(ctx, in.Key, in.Expected)
	}
	var ce *cas.ConflictError
	switch {
	case err == nil:
	case errors.As(err, &ce):
		out = Output{Conflict: true, HasCurrent: ce.HasCurrent, Current: ce.Current.Version, CurrentValue: string(ce.Current.Value)}
	default:
		out.Err = err
	}
	return out
}

// state is one key's state in the sequential specification: its version
// and value, and the largest version it ever had (versions never repeat).
type state struct {
	version cas.Version
	value   string
	highest cas.Version
}

// Model is the sequential specification of a cas.Store, partitioned by key,
// for porcupine: a Get returns the last written value and version; a write
// succeeds exactly when the expected version is the current one and then
// gets a version above every version the key ever had; a conflict happens
// exactly when it is not, and the current state it carries is the real one.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return state{} },
	Step: func(st, input, output any) (bool, any) {
		s, in, out := st.(state), input.(Input), output.(Output)
		if out.Err != nil {
			return false, s
		}
		if out.Conflict {
			if s.version == in.Expected {
				return false, s
			}
			if out.HasCurrent && (out.Current != s.version || (s.version != 0 && out.CurrentValue != s.value)) {
				return false, s
			}
			return true, s
		}
		switch in.Kind {
		case OpGet:
			return out.Version == s.version && (s.version == 0 || out.Value == s.value), s
		case OpSwap:
			if s.version != in.Expected || out.Version <= s.highest {
				return false, s
			}
			return true, state{version: out.Version, value: in.Value, highest: out.Version}
		default:
			if s.version != in.Expected || s.version == 0 {
				return false, s
			}
			return true, state{highest: s.highest}
		}
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%s -> %s", input.(Input), output.(Output))
	},
	DescribeState: func(st any) string {
		s := st.(state)
		if s.version == 0 {
			return fmt.Sprintf("absent (highest v%d)", s.highest)
		}
		return fmt.Sprintf("v%d %q", s.version, s.value)
	},
}
