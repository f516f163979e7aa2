package runslots

// SetWaitingHook makes c call f each time a blocking claim has been refused
// and is about to wait, with the scope it waits on. Set it before the
// client is used.
func SetWaitingHook(c *Client, f func(scope string)) {
	c.c.OnWait = func(scope string, _ error) { f(scope) }
}
