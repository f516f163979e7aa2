//go:build !unix

package pgserver

import "os/exec"

// runAs is the operating system user a throwaway cluster runs as; on this
// platform always the process's own (nil).
type runAs struct{}

// clusterUser returns nil: the cluster runs as the process's user.
func clusterUser() (*runAs, error) { return nil, nil }

// apply does nothing.
func (r *runAs) apply(*exec.Cmd) {}

// chown does nothing.
func (r *runAs) chown(string) error { return nil }

// canReach returns nil.
func (r *runAs) canReach(string) error { return nil }

// processExists reports true: stale clusters are never reaped here.
func processExists(int) bool { return true }

// pidNamespace returns "".
func pidNamespace() string { return "" }
