package pglease

// SetWaitingHook makes c call f each time a blocking acquire has been
// refused and is about to wait, with the lease name it waits on. Set it
// before the client is used.
func SetWaitingHook(c *Client, f func(name string)) {
	c.c.OnWait = func(name string, _ error) { f(name) }
}
