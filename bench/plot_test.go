package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// svgElement is an element of a written SVG, with its attributes and the
// text directly inside it.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
	// group is the class and data-name of the innermost enclosing <g>.
	groupClass, groupName string
}

// parseSVG decodes b as XML, failing the test when it is not well formed
// or its root is not an svg element, and returns its elements in order.
func parseSVG(t *testing.T, b []byte) []svgElement {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var out []svgElement
	type open struct {
		idx         int
		class, name string
	}
	var stack []open
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, b)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(stack) == 0 && (e.name != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", tok.Name)
			}
			o := open{idx: len(out)}
			if len(stack) > 0 {
				top := stack[len(stack)-1]
				o.class, o.name = top.class, top.name
			}
			if e.name == "g" {
				o.class, o.name = e.attrs["class"], e.attrs["data-name"]
			}
			e.groupClass, e.groupName = o.class, o.name
			out = append(out, e)
			stack = append(stack, o)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1].idx].text += string(tok)
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("%d elements left open", len(stack))
	}
	return out
}

func TestPlotSVG(t *testing.T) {
	clients := []float64{1, 2, 4, 8, 16, 32}
	p := Plot{
		Title:  "acquire + release cycles/s against clients",
		XLabel: "clients",
		YLabel: "cycles/s",
		Series: []Series{
			{Name: "pglease", X: clients, Y: []float64{900, 1500, 1900, 2000, 2050, 2100}},
			{Name: "pglock", X: clients, Y: []float64{950, 1600, 2000, 2200, 2400, 2600}},
			{Name: "etcd", X: clients, Y: []float64{500, 900, 1400, 1950, 2800, 3400}},
			{Name: "Redis <AOF & fsync>", X: clients, Y: []float64{1500, 3000, 5000, 6300, 10000, 14608}},
		},
	}
	var b bytes.Buffer
	if err := p.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, b.Bytes())

	texts := map[string][]string{} // axis class → its labels
	lines := map[string]int{}      // series name → polylines
	points := map[string]int{}     // series name → circles
	for _, e := range els {
		switch {
		case e.name == "text" && strings.HasPrefix(e.groupClass, "axis"):
			texts[e.groupClass] = append(texts[e.groupClass], e.text)
		case e.name == "polyline" && e.groupClass == "series":
			lines[e.groupName]++
		case e.name == "circle" && e.groupClass == "series":
			points[e.groupName]++
		}
	}
	xl := strings.Join(texts["axis x"], "|")
	if want := "1|2|4|8|16|32|clients"; xl != want {
		t.Errorf("x axis labels %q, want %q", xl, want)
	}
	yl := texts["axis y"]
	if len(yl) < 3 || yl[0] != "0" || yl[len(yl)-1] != "cycles/s" {
		t.Errorf("y axis labels %q: want ticks from 0 and the title last", yl)
	}
	if !strings.Contains(strings.Join(yl, "|"), "15,000") {
		t.Errorf("y axis labels %q: the top tick should reach the largest value (14,608) at 15,000", yl)
	}
	if len(lines) != len(p.Series) {
		t.Errorf("%d series drawn (%v), want %d", len(lines), lines, len(p.Series))
	}
	for _, s := range p.Series {
		if lines[s.Name] != 1 || points[s.Name] != len(s.X) {
			t.Errorf("series %q: %d lines and %d points, want 1 and %d", s.Name, lines[s.Name], points[s.Name], len(s.X))
		}
	}
}

func TestPlotSVGRefusesWhatItCannotDraw(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Plot
	}{
		{"no series", Plot{Title: "t"}},
		{"a series without points", Plot{Series: []Series{{Name: "pglease"}}}},
		{"x and y of different lengths", Plot{Series: []Series{{Name: "pglease", X: []float64{1, 2}, Y: []float64{1}}}}},
		{"x of 0 on a logarithmic axis", Plot{Series: []Series{{Name: "pglease", X: []float64{0}, Y: []float64{1}}}}},
		{"a negative y", Plot{Series: []Series{{Name: "pglease", X: []float64{1}, Y: []float64{-1}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.p.WriteSVG(&b); err == nil {
				t.Fatalf("WriteSVG succeeded, want an error")
			}
			if b.Len() != 0 {
				t.Fatalf("WriteSVG wrote %d bytes before failing", b.Len())
			}
		})
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		top  float64
		want []float64
	}{
		{14608, []float64{0, 5000, 10000, 15000}},
		{2100, []float64{0, 500, 1000, 1500, 2000, 2500}},
		{1, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}},
	} {
		got := niceTicks(tc.top)
		if len(got) != len(tc.want) || got[len(got)-1] < tc.top {
			t.Errorf("niceTicks(%v) = %v, want %v", tc.top, got, tc.want)
		}
	}
}
