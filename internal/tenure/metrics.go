package tenure

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MeterName is the instrumentation scope of every pglease instrument: the
// name of the meter the clients, the Keeper and the supervisor take from
// their MeterProvider.
const MeterName = "github.com/pglease/pglease"

// The attribute keys of the instruments (docs/observability.md lists them
// with their values).
const (
	// AttrKind is "lease" or "slot".
	AttrKind = attribute.Key("pglease.kind")
	// AttrName is the lease name or slot scope: only for a supervisor, and
	// for a client with Config.MetricsByName.
	AttrName = attribute.Key("pglease.name")
	// AttrLossReason is why a tenure was lost: refused, deadline or
	// connection.
	AttrLossReason = attribute.Key("pglease.loss.reason")
	// AttrRenewOutcome is what a renewal (or a Keeper's round) came to:
	// renewed, refused or error.
	AttrRenewOutcome = attribute.Key("pglease.renew.outcome")
)

// Bucket boundaries, in seconds and tenures: advice to the SDK, which a
// view may override.
var (
	// durationBuckets spans a local round trip (well under a millisecond)
	// to a renewal that hangs for seconds.
	durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// marginBuckets spans what a renewal can leave, from nothing to a
	// TTL of hours.
	marginBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 300, 900, 3600}
	// countBuckets spans the tenures one Keeper's round renews.
	countBuckets = []float64{0, 1, 10, 100, 1000, 10000, 100000}
)

// MeterProvider returns mp, or otel.GetMeterProvider() when mp is nil: the
// one rule of every Config's MeterProvider.
func MeterProvider(mp metric.MeterProvider) metric.MeterProvider {
	if mp == nil {
		return otel.GetMeterProvider()
	}
	return mp
}

// Instruments collects the errors of creating instruments and reports them
// once, to otel's error handler: an instrument that failed to be created
// is still usable (it records nothing), so metrics never stop a client.
type Instruments struct {
	m    metric.Meter
	errs []error
}

// NewInstruments returns a builder of instruments on the pglease meter
// of mp (MeterProvider's rule applies).
func NewInstruments(mp metric.MeterProvider) *Instruments {
	return &Instruments{m: MeterProvider(mp).Meter(MeterName)}
}

// Counter returns an Int64Counter.
func (b *Instruments) Counter(name, unit, desc string) metric.Int64Counter {
	c, err := b.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.errs = append(b.errs, err)
	return c
}

// UpDown returns an Int64UpDownCounter.
func (b *Instruments) UpDown(name, unit, desc string) metric.Int64UpDownCounter {
	c, err := b.m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.errs = append(b.errs, err)
	return c
}

// Seconds returns a Float64Histogram in seconds with the given buckets.
func (b *Instruments) Seconds(name, desc string, buckets []float64) metric.Float64Histogram {
	h, err := b.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(buckets...))
	b.errs = append(b.errs, err)
	return h
}

// Count returns an Int64Histogram of counts with the given unit and buckets.
func (b *Instruments) Count(name, unit, desc string, buckets []float64) metric.Int64Histogram {
	h, err := b.m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(buckets...))
	b.errs = append(b.errs, err)
	return h
}

// Done reports the errors of creating the instruments, if any, to otel's
// error handler.
func (b *Instruments) Done() {
	if err := errors.Join(b.errs...); err != nil {
		otel.Handle(err)
	}
}

// Opts is one precomputed attribute set as the options of each kind of
// measurement, so that recording allocates nothing.
type Opts struct {
	Add    []metric.AddOption
	Record []metric.RecordOption
}

// NewOpts returns the options of the attribute set of kvs.
func NewOpts(kvs ...attribute.KeyValue) Opts {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return Opts{Add: []metric.AddOption{o}, Record: []metric.RecordOption{o}}
}

// lossReason is why a tenure ended as lost; noLoss for an end that is not
// a loss (a release).
type lossReason int

const (
	noLoss lossReason = iota
	// lossRefused: the server said the tenure is over (a refused renewal,
	// a Keeper's round that did not renew it, a release that found it
	// gone).
	lossRefused
	// lossDeadline: the local deadline passed with no renewal failed or
	// in flight: none was made in time (not renewed, a process paused, a
	// Keeper not running).
	lossDeadline
	// lossConnection: the local deadline passed, or no time was left to
	// retry, after renewals failed with an unknown outcome (connection
	// errors, timeouts) or while one hung.
	lossConnection
	nReasons
)

// reasonNames are the values of AttrLossReason.
var reasonNames = [nReasons]string{lossRefused: "refused", lossDeadline: "deadline", lossConnection: "connection"}

// Outcomes of a renewal, the values of AttrRenewOutcome.
const (
	renewOK = iota
	renewRefused
	renewError
	nOutcomes
)

var outcomeNames = [nOutcomes]string{renewOK: "renewed", renewRefused: "refused", renewError: "error"}

// meters are a core's instruments and its attribute sets.
type meters struct {
	held         metric.Int64UpDownCounter
	acquisitions metric.Int64Counter
	refusals     metric.Int64Counter
	releases     metric.Int64Counter
	losses       metric.Int64Counter
	renewTime    metric.Float64Histogram
	margin       metric.Float64Histogram

	kind   string
	byName bool
	all    *attrs   // the attributes without a name
	names  sync.Map // name -> *attrs, with Config.MetricsByName
}

// attrs are the options of the measurements of one kind (and name, with
// Config.MetricsByName).
type attrs struct {
	base    Opts
	lost    [nReasons]Opts
	renewed [nOutcomes]Opts
}

// newMeters creates a core's instruments on mp.
func newMeters(mp metric.MeterProvider, kind string, byName bool) *meters {
	b := NewInstruments(mp)
	m := &meters{
		held: b.UpDown("pglease.tenure.held", "{tenure}",
			"Tenures (leases, slots) this process holds now: granted, and neither released nor ended."),
		acquisitions: b.Counter("pglease.tenure.acquisitions", "{tenure}",
			"Tenures granted (acquired leases, claimed slots)."),
		refusals: b.Counter("pglease.tenure.refusals", "{refusal}",
			"Tries to acquire or claim refused because the lease was held or the scope full; a blocking call counts each try."),
		releases: b.Counter("pglease.tenure.releases", "{tenure}",
			"Tenures released: ended on the server by this process."),
		losses: b.Counter("pglease.tenure.losses", "{tenure}",
			"Tenures lost while held, by reason: refused (the server says it is over), deadline (the local deadline passed with no renewal attempted in time), connection (renewals failed or hung until the deadline)."),
		renewTime: b.Seconds("pglease.renew.duration",
			"Round trip of a tenure's own renewal call, by outcome (a kept tenure's renewals are its Keeper's rounds).", durationBuckets),
		margin: b.Seconds("pglease.renew.margin",
			"Time left at each successful renewal: the new local deadline minus now. Falling towards zero is the early warning.", marginBuckets),
		kind:   kind,
		byName: byName,
	}
	b.Done()
	m.all = m.newAttrs(attribute.String(string(AttrKind), kind))
	return m
}

// newAttrs returns the options of base's measurements.
func (m *meters) newAttrs(base ...attribute.KeyValue) *attrs {
	a := &attrs{base: NewOpts(base...)}
	for r := lossRefused; r < nReasons; r++ {
		a.lost[r] = NewOpts(append(base[:len(base):len(base)], AttrLossReason.String(reasonNames[r]))...)
	}
	for o := range nOutcomes {
		a.renewed[o] = NewOpts(append(base[:len(base):len(base)], AttrRenewOutcome.String(outcomeNames[o]))...)
	}
	return a
}

// attrsOf returns the options of name's measurements: the kind's, or with
// Config.MetricsByName name's own, made once per name.
func (m *meters) attrsOf(name string) *attrs {
	if !m.byName {
		return m.all
	}
	if a, ok := m.names.Load(name); ok {
		return a.(*attrs)
	}
	a, _ := m.names.LoadOrStore(name, m.newAttrs(AttrKind.String(m.kind), AttrName.String(name)))
	return a.(*attrs)
}

// refused counts a refused try of name.
func (m *meters) refused(ctx context.Context, name string) {
	m.refusals.Add(ctx, 1, m.attrsOf(name).base.Add...)
}

// Refused counts a try refused by the server on name (the lease held, the
// scope full); pglease and runslots call it for each refusal they return.
func (c *Core) Refused(ctx context.Context, name string) { c.m.refused(ctx, name) }
