//go:build unix

package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// runAs is the operating system user a throwaway cluster runs as when the
// process runs as root. A nil *runAs means the process's own user.
type runAs struct {
	name     string
	uid, gid uint32
}

// clusterUser returns nil unless the process runs as root, and then the
// user postgres: initdb and pg_ctl refuse to run as root.
func clusterUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("initdb refuses to run as root, and the user to run it as is missing: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres: gid %q: %w", u.Gid, err)
	}
	return &runAs{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

// apply makes cmd run as r.
func (r *runAs) apply(cmd *exec.Cmd) {
	if r == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: r.uid, Gid: r.gid}}
}

// chown gives path to r.
func (r *runAs) chown(path string) error {
	if r == nil {
		return nil
	}
	if err := os.Chown(path, int(r.uid), int(r.gid)); err != nil {
		return fmt.Errorf("give %s to user %s: %w", path, r.name, err)
	}
	return nil
}

// canReach returns an error if r cannot search every directory from the root
// down to dir, so could not use a cluster directory created in dir.
func (r *runAs) canReach(dir string) error {
	if r == nil {
		return nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		perm := fi.Mode().Perm()
		var searchable bool
		switch {
		case !ok:
			searchable = true
		case st.Uid == r.uid:
			searchable = perm&0o100 != 0
		case st.Gid == r.gid:
			searchable = perm&0o010 != 0
		default:
			searchable = perm&0o001 != 0
		}
		if !searchable {
			return fmt.Errorf("user %s cannot enter %s, so cannot use a cluster under %s", r.name, d, dir)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// processExists reports whether a process with this PID may exist.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pidNamespace identifies the PID namespace of the process, or is empty
// where there is no such thing. PIDs are compared only within one.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}
