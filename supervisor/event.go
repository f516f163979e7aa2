package supervisor

import "fmt"

// EventKind says what happened.
type EventKind int

const (
	// EventAcquired: this supervisor took the lease (or slot) and starts
	// its workload.
	EventAcquired EventKind = iota + 1
	// EventLost: the lease was lost while held (renewal refused, or the
	// local deadline passed); the workload was cancelled. Err says why.
	EventLost
	// EventReleased: this supervisor released the lease after its workload
	// returned.
	EventReleased
	// EventLeaderSeen: while standing by, this supervisor saw a new holder
	// (Holder, Fence) of the lease, or a full slot scope.
	EventLeaderSeen
	// EventStuck: the workload has not returned StopTimeout after its
	// context was cancelled. Err is the cancellation cause.
	EventStuck
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventLost:
		return "lost"
	case EventReleased:
		return "released"
	case EventLeaderSeen:
		return "leader-seen"
	case EventStuck:
		return "stuck"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is passed to Config.Observer.
type Event struct {
	Kind EventKind
	// Name is the lease name, or the slot scope.
	Name string
	// Slot is the slot number in the slot variant, else 0.
	Slot int
	// Holder and Fence identify the tenure: this supervisor's for
	// Acquired, Lost, Released and Stuck, the other holder's for
	// LeaderSeen (empty and 0 when a slot scope is full).
	Holder string
	Fence  int64
	// Err is the cause for Lost and Stuck.
	Err error
}
