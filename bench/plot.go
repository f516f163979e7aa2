package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Plot is a line chart of one or more series over a logarithmic x axis
// (numbers of clients) and a linear y axis starting at zero, written as a
// standalone SVG file with no script and no external resource.
type Plot struct {
	Title  string
	XLabel string
	YLabel string
	Series []Series
}

// Series is one named line of a Plot: Y[i] at X[i].
type Series struct {
	Name string
	X, Y []float64
}

// The plot's geometry, in SVG user units.
const (
	plotWidth  = 760
	plotHeight = 440
	plotLeft   = 84  // room for the y axis' tick labels and title
	plotRight  = 190 // room for the legend
	plotTop    = 48  // room for the title
	plotBottom = 56  // room for the x axis' tick labels and title
)

// plotColors are the series' colours, in order (distinguishable in colour
// and in greyscale print), repeated when there are more series.
var plotColors = []string{"#1f5fa8", "#d9722b", "#3b9a4a", "#b8322e", "#7a4fa0", "#6b6b6b"}

// check returns why p cannot be drawn, or nil.
func (p Plot) check() error {
	if len(p.Series) == 0 {
		return errors.New("plot: no series")
	}
	for _, s := range p.Series {
		switch {
		case len(s.X) == 0:
			return fmt.Errorf("plot: series %q has no points", s.Name)
		case len(s.X) != len(s.Y):
			return fmt.Errorf("plot: series %q has %d x values and %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			if !(s.X[i] > 0) || math.IsInf(s.X[i], 0) {
				return fmt.Errorf("plot: series %q: x = %v is not a positive number (the x axis is logarithmic)", s.Name, s.X[i])
			}
			if !(s.Y[i] >= 0) || math.IsInf(s.Y[i], 0) {
				return fmt.Errorf("plot: series %q: y = %v is not a number ≥ 0", s.Name, s.Y[i])
			}
		}
	}
	return nil
}

// WriteSVG draws p to w. It fails, writing nothing, when p has no series,
// a series without points, or a value the axes cannot show.
func (p Plot) WriteSVG(w io.Writer) error {
	if err := p.check(); err != nil {
		return err
	}
	var xs []float64
	ymax := 0.0
	for _, s := range p.Series {
		xs = append(xs, s.X...)
		ymax = max(ymax, slices.Max(s.Y))
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	yticks := niceTicks(ymax)
	ytop := yticks[len(yticks)-1]
	lx0, lx1 := math.Log(xs[0]), math.Log(xs[len(xs)-1])
	if lx1 == lx0 { // one x value: centre it
		lx0, lx1 = lx0-1, lx1+1
	}
	iw, ih := float64(plotWidth-plotLeft-plotRight), float64(plotHeight-plotTop-plotBottom)
	px := func(x float64) float64 { return plotLeft + (math.Log(x)-lx0)/(lx1-lx0)*iw }
	py := func(y float64) float64 { return plotTop + ih - y/ytop*ih }

	var b strings.Builder
	f := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	f(`<?xml version="1.0" encoding="UTF-8"?>`)
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, plotWidth, plotHeight, plotWidth, plotHeight)
	f(`<title>%s</title>`, esc(p.Title))
	f(`<rect width="100%%" height="100%%" fill="#ffffff"/>`)
	f(`<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`, plotLeft, esc(p.Title))

	f(`<g class="axis y">`)
	for _, t := range yticks {
		y := py(t)
		f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>`, num(plotLeft), num(y), num(plotLeft+iw), num(y))
		f(`<text x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`, num(plotLeft-8), num(y), count(t))
	}
	f(`<line x1="%d" y1="%d" x2="%d" y2="%s" stroke="#333333"/>`, plotLeft, plotTop, plotLeft, num(plotTop+ih))
	f(`<text transform="translate(18 %s) rotate(-90)" text-anchor="middle">%s</text>`, num(plotTop+ih/2), esc(p.YLabel))
	f(`</g>`)

	f(`<g class="axis x">`)
	for _, x := range xs {
		f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>`, num(px(x)), num(plotTop+ih), num(px(x)), num(plotTop+ih+5))
		f(`<text x="%s" y="%s" text-anchor="middle">%s</text>`, num(px(x)), num(plotTop+ih+19), strconv.FormatFloat(x, 'f', -1, 64))
	}
	f(`<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#333333"/>`, plotLeft, num(plotTop+ih), num(plotLeft+iw), num(plotTop+ih))
	f(`<text x="%s" y="%d" text-anchor="middle">%s</text>`, num(plotLeft+iw/2), plotHeight-12, esc(p.XLabel))
	f(`</g>`)

	for i, s := range p.Series {
		color := plotColors[i%len(plotColors)]
		f(`<g class="series" data-name="%s">`, esc(s.Name))
		idx := make([]int, len(s.X))
		for j := range idx {
			idx[j] = j
		}
		slices.SortFunc(idx, func(a, c int) int { return cmpFloat(s.X[a], s.X[c]) })
		pts := make([]string, len(idx))
		for j, k := range idx {
			pts[j] = num(px(s.X[k])) + "," + num(py(s.Y[k]))
		}
		f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), color)
		for _, k := range idx {
			f(`<circle cx="%s" cy="%s" r="3.5" fill="%s"><title>%s, %s: %s</title></circle>`,
				num(px(s.X[k])), num(py(s.Y[k])), color, esc(s.Name), strconv.FormatFloat(s.X[k], 'f', -1, 64), count(s.Y[k]))
		}
		ly := plotTop + 10 + 22*i
		lx := plotWidth - plotRight + 16
		f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`, lx, ly, lx+22, ly, color)
		f(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`, lx+28, ly, esc(s.Name))
		f(`</g>`)
	}
	f(`</svg>`)
	_, err := io.WriteString(w, b.String())
	return err
}

// niceTicks returns ticks from 0 to at least top, 1, 2 or 5 times a power
// of ten apart, five to ten of them.
func niceTicks(top float64) []float64 {
	if top <= 0 {
		return []float64{0, 1}
	}
	step := math.Pow(10, math.Floor(math.Log10(top/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if top/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, v)
		if v >= top {
			return out
		}
	}
}

// num formats a coordinate with at most one decimal.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
