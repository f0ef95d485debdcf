//go:build !linux

package story

import "os/exec"

// startTied starts cmd. Only Linux can tie a child's life to its parent's
// (see child_linux.go); elsewhere a runner killed while gc-pause's child is
// stopped leaves the child stopped.
func startTied(cmd *exec.Cmd, _ <-chan struct{}) error { return cmd.Start() }
