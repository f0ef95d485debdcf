//go:build linux

package story

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startTied starts cmd so that it is killed when this process dies, even
// while it is stopped: the runner stops gc-pause's child with SIGSTOP, and
// a runner killed meanwhile (SIGKILL, a test binary's timeout, a crash)
// would otherwise leave it stopped for ever, adopted by init. Linux sends
// the parent-death signal when the thread that started the child exits,
// not the process, so the start happens on a thread locked for the
// child's life; the thread is let go once exited is closed.
func startTied(cmd *exec.Cmd, exited <-chan struct{}) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			<-exited
		}
	}()
	return <-started
}
