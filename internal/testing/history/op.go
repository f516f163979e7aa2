package history

import (
	"fmt"
	"sync"
	"time"
)

// Kind is the pglease call an Op records.
type Kind uint8

// Kinds of operations. Fence, Slot, TTL and the other fields of an Op mean
// what each kind says.
const (
	// Acquire is pglease.acquire. OK: Fence is the fence granted (a new
	// tenure, or the holder's own live one re-pinned). Refused: Other and
	// Fence are the holder and fence the server named, ExpiresIn the time
	// left it reported.
	Acquire Kind = iota + 1
	// Renew is pglease.renew of the tenure (Name, Fence).
	Renew
	// Release is pglease.release of the tenure (Name, Fence).
	Release
	// Write is a fenced write: pglease.assert_held(Name, Fence) and a write
	// in one transaction. OK means it committed; Refused means PGL01.
	Write
	// Claim is pglease.claim_slot with Capacity. OK: Slot and Fence are the
	// slot granted. Refused: InUse is the number of live holders the server
	// counted.
	Claim
	// RenewSlot is pglease.renew_slot of the tenure (Name, Slot, Fence).
	RenewSlot
	// ReleaseSlot is pglease.release_slot of the tenure (Name, Slot, Fence).
	ReleaseSlot
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Renew:
		return "renew"
	case Release:
		return "release"
	case Write:
		return "write"
	case Claim:
		return "claim"
	case RenewSlot:
		return "renew_slot"
	case ReleaseSlot:
		return "release_slot"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// slot reports whether k is a slot operation.
func (k Kind) slot() bool { return k >= Claim }

// Outcome is what the client learned from an operation.
type Outcome uint8

// Outcomes.
const (
	// OK: granted, renewed, released, committed.
	OK Outcome = iota + 1
	// Refused: the server answered no (held, full, not renewed, not
	// released, PGL01). It changed nothing.
	Refused
	// Unknown: an error (connection lost, timeout). The operation may have
	// taken effect, at any time after Call, even after Return.
	Unknown
	// Aborted: the server raised a serialization failure (SQLSTATE 40001)
	// and the call's transaction rolled back: it changed nothing and tells
	// nothing (not a grant, not a refusal). A call in a transaction at
	// REPEATABLE READ or SERIALIZABLE gets it when a row it must decide on
	// changed after the transaction's snapshot; pglease.acquire at any
	// level after ten changed attempts.
	Aborted
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	case Aborted:
		return "aborted"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Isolation is the transaction an operation ran in.
type Isolation uint8

// Isolation levels. The zero value is a call outside any explicit
// transaction (its statement's own, at READ COMMITTED); the others are
// calls in a transaction opened with BEGIN ISOLATION LEVEL, whose snapshot
// was taken before the call (Call is read after it) and which committed
// before Return.
const (
	NoTx Isolation = iota
	ReadCommitted
	RepeatableRead
	Serializable
)

// Isolations lists the isolation levels, NoTx first.
var Isolations = []Isolation{NoTx, ReadCommitted, RepeatableRead, Serializable}

// String returns the level's name.
func (i Isolation) String() string {
	switch i {
	case NoTx:
		return "no transaction"
	case ReadCommitted:
		return "read committed"
	case RepeatableRead:
		return "repeatable read"
	case Serializable:
		return "serializable"
	}
	return fmt.Sprintf("Isolation(%d)", int(i))
}

// Op is one call, invoked at Call and answered at Return, both read from one
// monotonic clock (a Recorder's). Its effect on the server, if any, took
// place somewhere between the two (for an Unknown outcome: at any time
// after Call).
type Op struct {
	Kind    Kind
	Outcome Outcome
	// Holder is the client's holder identity. A holder makes one call at a
	// time: Check verifies it.
	Holder string
	// Name is the lease name, or the slot scope.
	Name string
	// Slot is the slot number of slot operations (for Claim, the slot
	// granted); 0 for leases.
	Slot int
	// Fence is the fence the operation carried or was granted (see Kind).
	Fence int64
	// TTL is the time to live asked for by Acquire, Renew, Claim and
	// RenewSlot.
	TTL time.Duration
	// Capacity is the capacity a Claim passed.
	Capacity int
	// Units is the units a Claim asked for (0: one unit, as claims before
	// 0.3.0 took).
	Units int
	// Other is the holder a refused Acquire named.
	Other string
	// ExpiresIn is the expires_in a refused Acquire reported: the named
	// tenure's expiry minus the server clock reading that decided the
	// refusal. Zero means not recorded (a refusal reports at least a
	// microsecond); Check verifies any other value.
	ExpiresIn time.Duration
	// InUse is the units in use a refused Claim reported (live holders,
	// when every claim takes one unit).
	InUse int
	// Isolation is the transaction the call ran in (NoTx: none).
	Isolation Isolation
	// Snapshot, for a call in a transaction at RepeatableRead or
	// Serializable, is a time on the recorder's clock no later than the
	// taking of the transaction's snapshot (read before its first
	// statement was sent); zero otherwise. A refusal may describe the
	// rows as they were then (see Report.SnapshotRefusals).
	Snapshot time.Duration
	// Call and Return are when the call was made and answered, on the
	// recorder's clock. For a call in an explicit transaction, Call is read
	// after the transaction's snapshot was taken, and Return after its
	// COMMIT (or ROLLBACK) returned.
	Call, Return time.Duration
}

// String describes the op in one line.
func (o Op) String() string {
	s := fmt.Sprintf("%s %s by %s on %q", o.Kind, o.Outcome, o.Holder, o.Name)
	if o.Kind.slot() {
		s += fmt.Sprintf(" slot %d", o.Slot)
	}
	s += fmt.Sprintf(" fence %d [%s, %s]", o.Fence, o.Call, o.Return)
	if o.TTL > 0 {
		s += fmt.Sprintf(" ttl %s", o.TTL)
	}
	if o.Kind == Claim {
		s += fmt.Sprintf(" capacity %d", o.Capacity)
		if o.Units > 1 {
			s += fmt.Sprintf(" units %d", o.Units)
		}
	}
	if o.Other != "" {
		s += fmt.Sprintf(" (held by %s", o.Other)
		if o.ExpiresIn != 0 {
			s += fmt.Sprintf(" for another %s", o.ExpiresIn)
		}
		s += ")"
	}
	if o.Isolation != NoTx {
		s += " at " + o.Isolation.String()
	}
	return s
}

// Recorder collects Ops from many goroutines, with times on one monotonic
// clock. The zero value is not usable; call NewRecorder.
type Recorder struct {
	base time.Time
	mu   sync.Mutex
	ops  []Op
}

// NewRecorder returns a Recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{base: time.Now()} }

// Now returns the time on the recorder's clock: the monotonic time since
// NewRecorder.
func (r *Recorder) Now() time.Duration { return time.Since(r.base) }

// At returns the time t on the recorder's clock. t must carry a monotonic
// reading (come from time.Now).
func (r *Recorder) At(t time.Time) time.Duration { return t.Sub(r.base) }

// Add records op.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Len returns the number of ops recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Ops returns a copy of the ops recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// units is the units a Claim op asked for.
func (o *Op) units() int { return max(o.Units, 1) }
