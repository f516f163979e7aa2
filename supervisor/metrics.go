package supervisor

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/tenure"
)

// attrTransition is what a leadership transition was: acquired, released
// or lost.
const attrTransition = attribute.Key("pglease.transition")

// A transition of a supervisor's leadership.
const (
	// transAcquired: it took the lease (or slot) and starts its workload.
	transAcquired = iota
	// transReleased: its workload returned and it let the tenure go
	// (released, or left to expire when the release failed).
	transReleased
	// transLost: its tenure was lost while the workload ran.
	transLost
	nTransitions
)

var transitionNames = [nTransitions]string{transAcquired: "acquired", transReleased: "released", transLost: "lost"}

// meters are a supervisor's instruments and attribute sets: its kind and
// name, always (one series per supervisor).
type meters struct {
	leading     metric.Int64UpDownCounter
	transitions metric.Int64Counter
	base        tenure.Opts
	trans       [nTransitions]tenure.Opts
}

// newMeters creates the instruments of a supervisor of kind ("lease" or
// "slot") and name on mp.
func newMeters(mp metric.MeterProvider, kind, name string) *meters {
	b := tenure.NewInstruments(mp)
	m := &meters{
		leading: b.UpDown("pglease.supervisor.leading", "{supervisor}",
			"Supervisors running their workload now under their lease or slot: 0 or 1 per supervisor."),
		transitions: b.Counter("pglease.supervisor.transitions", "{transition}",
			"Changes of a supervisor's leadership: acquired (it leads), released (its workload returned and it let go), lost (its tenure was lost under the workload)."),
	}
	b.Done()
	base := []attribute.KeyValue{tenure.AttrKind.String(kind), tenure.AttrName.String(name)}
	m.base = tenure.NewOpts(base...)
	for tr := range nTransitions {
		m.trans[tr] = tenure.NewOpts(append(base[:2:2], attrTransition.String(transitionNames[tr]))...)
	}
	return m
}

// lead records that the supervisor leads (on true) or no longer does,
// after transition tr.
func (m *meters) lead(on bool, tr int) {
	ctx := context.Background()
	d := int64(1)
	if !on {
		d = -1
	}
	m.leading.Add(ctx, d, m.base.Add...)
	m.transitions.Add(ctx, 1, m.trans[tr].Add...)
}
