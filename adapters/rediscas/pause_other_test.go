//go:build !unix

package rediscas_test

import (
	"fmt"
	"os"
)

// pauseChildEnv: see pause_test.go (TestProcessPause needs SIGSTOP).
const pauseChildEnv = "OCCKIT_REDISCAS_PAUSE_CHILD"

func pauseChild() int {
	fmt.Fprintln(os.Stderr, "TestProcessPause needs a unix system")
	return 1
}
