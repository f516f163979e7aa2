package obstest

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Panel is one chart of a Plot, stacked above the next, all on one time
// axis.
type Panel struct {
	// Title names what the panel shows, such as a metric.
	Title string
	// Lines are its series.
	Lines []Line
	// Min and Max fix the value axis when Max > Min; otherwise it spans
	// the values.
	Min, Max float64
}

// Line is one series of a panel.
type Line struct {
	Label  string
	Color  string // an SVG color
	Points []Point
	// Step draws the series as steps (a value holds until the next one)
	// rather than straight lines between points.
	Step bool
}

// Event marks a moment on every panel, as a dashed vertical line.
type Event struct {
	T     time.Time
	Label string
}

// Plot geometry, in SVG user units.
const (
	plotWidth   = 860.0
	panelHeight = 150.0
	marginLeft  = 64.0
	marginRight = 150.0 // the legend
	marginTop   = 96.0  // the title, and a row per event label
	panelGap    = 34.0
	marginBot   = 40.0
)

// Plot writes panels as one SVG image to w, over the time span from start
// to end, with events marked and time shown in seconds from start. A gap
// in a series longer than twice maxStep is drawn as a gap.
func Plot(w io.Writer, title string, start, end time.Time, maxStep time.Duration, panels []Panel, events []Event) error {
	if !end.After(start) || len(panels) == 0 {
		return fmt.Errorf("plot: nothing to draw (%d panels from %s to %s)", len(panels), start, end)
	}
	height := marginTop + float64(len(panels))*panelHeight + float64(len(panels)-1)*panelGap + marginBot
	span := end.Sub(start).Seconds()
	x := func(t time.Time) float64 {
		return marginLeft + t.Sub(start).Seconds()/span*(plotWidth-marginLeft-marginRight)
	}
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, height, plotWidth, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%g" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, esc(title))

	right := plotWidth - marginRight
	for i, panel := range panels {
		top := marginTop + float64(i)*(panelHeight+panelGap)
		bottom := top + panelHeight
		lo, hi := panel.Min, panel.Max
		if hi <= lo {
			lo, hi = valueRange(panel.Lines)
		}
		y := func(v float64) float64 { return bottom - (v-lo)/(hi-lo)*panelHeight }
		p(`<g>` + "\n")
		p(`<text x="%g" y="%g" font-weight="bold">%s</text>`+"\n", marginLeft, top-8, esc(panel.Title))
		p(`<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#999"/>`+"\n", marginLeft, top, right-marginLeft, panelHeight)
		for _, v := range ticks(lo, hi, 4) {
			p(`<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", marginLeft, y(v), right, y(v))
			p(`<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", marginLeft-6, y(v)+4, number(v))
		}
		for _, s := range ticks(0, span, 8) {
			xs := marginLeft + s/span*(right-marginLeft)
			p(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/>`+"\n", xs, top, xs, bottom)
			if i == len(panels)-1 {
				p(`<text x="%.1f" y="%g" text-anchor="middle">%s s</text>`+"\n", xs, bottom+16, number(s))
			}
		}
		for j, line := range panel.Lines {
			for _, seg := range segments(line.Points, maxStep) {
				p(`<polyline fill="none" stroke="%s" stroke-width="2" points="`, esc(line.Color))
				for k, pt := range seg {
					if line.Step && k > 0 {
						p("%.1f,%.1f ", x(pt.T), y(seg[k-1].V))
					}
					p("%.1f,%.1f ", x(pt.T), y(pt.V))
				}
				p(`"/>` + "\n")
			}
			ly := top + 16 + float64(j)*16
			p(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/>`+"\n", right+10, ly-4, right+28, ly-4, esc(line.Color))
			p(`<text x="%g" y="%g">%s</text>`+"\n", right+32, ly, esc(line.Label))
		}
		p(`</g>` + "\n")
	}
	last := marginTop + float64(len(panels))*panelHeight + float64(len(panels)-1)*panelGap
	for i, e := range events {
		xe := x(e.T)
		ly := 42 + float64(i%3)*14
		p(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#c00" stroke-dasharray="4 3"/>`+"\n", xe, ly+4, xe, last)
		anchor, dx := "start", 3.0
		if xe > right-110 {
			anchor, dx = "end", -3
		}
		p(`<text x="%.1f" y="%g" fill="#c00" text-anchor="%s">%s</text>`+"\n", xe+dx, ly, anchor, esc(e.Label))
	}
	p("</svg>\n")
	// The image must be well-formed XML.
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("plot: the SVG is not well-formed: %w", err)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// segments splits points where two follow each other more than twice
// maxStep apart.
func segments(points []Point, maxStep time.Duration) [][]Point {
	var out [][]Point
	var cur []Point
	for i, pt := range points {
		if i > 0 && pt.T.Sub(points[i-1].T) > 2*maxStep {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, pt)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// valueRange returns a value axis holding every point and 0, with a
// little room.
func valueRange(lines []Line) (lo, hi float64) {
	lo, hi = 0, 0
	for _, l := range lines {
		for _, pt := range l.Points {
			lo, hi = math.Min(lo, pt.V), math.Max(hi, pt.V)
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	pad := (hi - lo) * 0.08
	return lo - pad, hi + pad
}

// ticks returns about n round values between lo and hi.
func ticks(lo, hi float64, n int) []float64 {
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// number formats a tick value.
func number(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// esc escapes text for SVG.
func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
