//go:build !linux

package story

// tiedHelperMain: the tied-child test is Linux's (child_linux_test.go).
func tiedHelperMain() {}
