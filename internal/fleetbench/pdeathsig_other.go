//go:build !linux

package fleetbench

import "os/exec"

// dieWithParent: only Linux can tie a child's life to its parent's; the
// measurement itself needs Linux's /proc anyway.
func dieWithParent(*exec.Cmd) {}
