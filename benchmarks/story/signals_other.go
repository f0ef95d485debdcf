//go:build !unix

package story

import (
	"errors"
	"fmt"
	"os"
)

// stopProcess needs SIGSTOP, which only Unix has.
func stopProcess(*os.Process) error {
	return fmt.Errorf("stopping a process: %w", errors.ErrUnsupported)
}

// continueProcess needs SIGCONT, which only Unix has.
func continueProcess(*os.Process) error {
	return fmt.Errorf("resuming a process: %w", errors.ErrUnsupported)
}
