//go:build unix

package story

import (
	"os"
	"syscall"
)

// stopProcess stops p (SIGSTOP), as a long GC pause stops a process.
func stopProcess(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// continueProcess resumes a stopped p (SIGCONT).
func continueProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
