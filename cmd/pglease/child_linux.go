package main

import "syscall"

// sysProcAttr puts the command in a process group of its own, and has the
// kernel kill it if pglease dies: nobody renews the lease then.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
