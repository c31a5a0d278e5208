//go:build !linux

package redistest

import "syscall"

// ChildProcAttr returns nil: parent-death signals are Linux-only.
func ChildProcAttr() *syscall.SysProcAttr { return nil }
