package exporter

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// textWriter writes the Prometheus text exposition format, version 0.0.4:
// for each metric family its # HELP and # TYPE lines, then its samples.
// https://prometheus.io/docs/instrumenting/exposition_formats/
type textWriter struct {
	b bytes.Buffer
}

// label is one label pair of a sample.
type label struct{ name, value string }

// family starts metric family name of type typ ("gauge" or "counter").
func (w *textWriter) family(name, typ, help string) {
	w.b.WriteString("# HELP ")
	w.b.WriteString(name)
	w.b.WriteByte(' ')
	w.b.WriteString(escapeHelp(help))
	w.b.WriteString("\n# TYPE ")
	w.b.WriteString(name)
	w.b.WriteByte(' ')
	w.b.WriteString(typ)
	w.b.WriteByte('\n')
}

// sample writes one sample of name with its labels and value.
func (w *textWriter) sample(name string, value float64, labels ...label) {
	w.sampleText(name, formatValue(value), labels...)
}

// sampleInt writes one sample with an integer value, exactly (a float64
// holds integers exactly only up to 2^53).
func (w *textWriter) sampleInt(name string, value int64, labels ...label) {
	w.sampleText(name, strconv.FormatInt(value, 10), labels...)
}

func (w *textWriter) sampleText(name, value string, labels ...label) {
	w.b.WriteString(name)
	if len(labels) > 0 {
		w.b.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.b.WriteString(l.name)
			w.b.WriteString(`="`)
			w.b.WriteString(escapeLabelValue(l.value))
			w.b.WriteByte('"')
		}
		w.b.WriteByte('}')
	}
	w.b.WriteByte(' ')
	w.b.WriteString(value)
	w.b.WriteByte('\n')
}

// escapeLabelValue escapes a label value as the format requires: backslash,
// double quote and line feed. Invalid UTF-8 (a database whose encoding is
// SQL_ASCII can hold any bytes) becomes U+FFFD, since Prometheus refuses a
// whole scrape with one invalid label value.
func escapeLabelValue(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return labelEscaper.Replace(s)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// escapeHelp escapes a HELP text: backslash and line feed.
func escapeHelp(s string) string {
	return helpEscaper.Replace(s)
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// formatValue formats a sample value: integers exactly, other numbers in
// the shortest form that parses back to the same float64.
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
