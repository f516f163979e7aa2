package obstest

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseText(t *testing.T) {
	body := "# HELP a_total A counter.\n# TYPE a_total counter\na_total{kind=\"lease\"} 3\n" +
		"# HELP b B.\n# TYPE b gauge\nb{name=\"q\\\"\\\\\\n\",x=\"y\"} -1.5\nb 2\n"
	got, err := ParseText(body)
	if err != nil {
		t.Fatal(err)
	}
	if s := got["a_total{kind=lease}"]; s.Value != 3 {
		t.Errorf("a_total: got %+v", s)
	}
	if s, ok := got["b{name=q\"\\\n,x=y}"]; !ok || s.Value != -1.5 || s.Label("name") != "q\"\\\n" {
		t.Errorf("b with escapes: got %+v (present %v) in %v", s, ok, got)
	}
	for _, bad := range []string{
		"b 1\n",                                 // no TYPE
		"# TYPE b gauge\nb{name=\"a\nb\"} 1\n",  // raw line feed
		"# TYPE b gauge\nb{name=\"a\\tb\"} 1\n", // bad escape
		"# TYPE b gauge\nb 1\nb 2\n",            // twice
		"# TYPE b gauge\n# TYPE b gauge\nb 1\n", // TYPE twice
		"# TYPE b summary\nc_sum 1\n",           // not b's
		"# TYPE b gauge\nb one\n",               // value
	} {
		if _, err := ParseText(bad); err == nil {
			t.Errorf("ParseText(%q): got no error", bad)
		}
	}
}

func TestPlot(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	var held, fence []Point
	for i := range 60 {
		if i == 30 || i == 31 {
			continue // a gap
		}
		pt := start.Add(time.Duration(i) * time.Second)
		held = append(held, Point{pt, float64(i / 20 % 2)})
		fence = append(fence, Point{pt, float64(1 + i/20)})
	}
	var b bytes.Buffer
	err := Plot(&b, `Lease "leader" <as seen> & more`, start, start.Add(time.Minute), time.Second,
		[]Panel{
			{Title: "pglease_lease_held", Min: -0.1, Max: 1.1, Lines: []Line{{Label: "held", Color: "#1f77b4", Points: held, Step: true}}},
			{Title: "pglease_lease_fence", Lines: []Line{{Label: "fence", Color: "#2ca02c", Points: fence, Step: true}}},
		},
		[]Event{{start.Add(20 * time.Second), "leader cut off"}})
	if err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if n := strings.Count(svg, "<polyline"); n != 4 {
		t.Errorf("polylines: got %d, want 4 (two series, each split by the gap)", n)
	}
	for _, want := range []string{"&lt;as seen&gt; &amp; more", "leader cut off", "pglease_lease_fence", "60 s"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if err := Plot(&b, "empty", start, start, time.Second, nil, nil); err == nil {
		t.Error("Plot of nothing: got no error")
	}
}
