// Package shardgroup shares the M shards of a named group evenly among the
// N workers that join it: each shard is owned by one worker at a time, its
// work runs as a function with a context that ends when the shard moves
// away or is lost, and its writes can be fenced with the shard's fence.
//
// # Overview
//
// A worker builds a Worker with New (the group, its shards as a count or a
// list of names, an optional maximum) and calls Run. Run creates the group
// when it does not exist (pglease.group_create, idempotent), then calls
// pglease.group_sync once per Interval: one round trip that heartbeats the
// worker, renews every shard it owns, computes its fair share on the
// server and takes or offers shards. Every decision is the server's, on its
// clock, under the group's row lock; this package only follows it
// (docs/groups.md has the protocol and its bounds).
//
// For each shard the server says the worker owns, Run calls the function
// given to New in a goroutine of its own, with a Shard (its name and fence;
// Shard.WithFence for fenced writes). Leave hands every shard over and
// makes Run return.
//
// # State model
//
// Each shard, as this worker sees it, is in one state:
//
//	not owned --group_sync lists it--> running
//	running --group_sync asks to hand it over, or Leave--> handing over
//	handing over --the function returned; group_release--> not owned
//	running --group_sync no longer lists it, or no successful sync for
//	          TTL - SafetyMargin--> lost (context cancelled) --returned--> not owned
//	running --the function returned on its own--> not owned locally; it
//	          runs again after the next sync while the server still lists it
//
// A worker itself is joining (before its first sync), a member (syncing),
// or leaving (Leave called: group_leave, then every shard handed over).
//
// # Safety
//
// A shard is a pglease lease ('{group}/shard'): two workers never hold it
// at once on the server's clock, and its fence grows at every move. A
// handover cancels the function's context and waits for the function to
// return before releasing the shard, so the next owner starts only after
// this one stopped. A shard's context also ends SafetyMargin before the
// server-side expiry its last successful sync guaranteed (the time the call
// was sent + TTL), so a worker cut off from the database stops its work
// before another can take the shard. What that cannot cover (a process
// paused past its margin, a function that ignores its context) the fence
// does: writes made with Shard.WithFence commit only while the tenure is
// current.
//
// # Failure handling
//
// A failed sync is logged and retried at the next Interval; after TTL -
// SafetyMargin without a successful one every shard's context ends. A
// worker that dies is dropped by the others after its TTL: its shards are
// free at their expiry and taken at the others' next sync, so within TTL +
// Interval. Handovers are heard by LISTEN (the release NOTIFYs the group)
// and taken at once; without notifications, at the next Interval.
//
// Not guaranteed: the function runs at most once at a time per shard across
// the fleet only as far as it honours its context; a member name must be
// unique per process (the default, pglease.NewHolderID, is).
package shardgroup
