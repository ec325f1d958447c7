package fleetbench

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the child if this process dies
// without stopping it (a SIGKILL, a crash), so no benchmark outlives its
// run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
