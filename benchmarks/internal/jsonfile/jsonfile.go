// Package jsonfile writes the result files the benchmark commands leave
// behind (results.json, stories.json, faults.json) in one format: indented
// JSON ending in a newline, so that they read well and diff cleanly.
package jsonfile

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Write writes v to path as JSON indented by two spaces with a final
// newline, creating path's directory first. Its errors are those of
// os.MkdirAll, json.MarshalIndent and os.WriteFile, unwrapped, for the
// caller to wrap as it does its other errors.
func Write(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
