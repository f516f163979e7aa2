package obstest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Series is one sample of a text exposition: its metric name, its labels
// in the order written (values unescaped), and its value.
type Series struct {
	Name   string
	Labels [][2]string
	Value  float64
}

// Key returns the series as name{label=value,...} with the labels sorted
// and their values unescaped, for comparisons.
func (s Series) Key() string {
	pairs := make([]string, len(s.Labels))
	for i, l := range s.Labels {
		pairs[i] = l[0] + "=" + l[1]
	}
	slices.Sort(pairs)
	return s.Name + "{" + strings.Join(pairs, ",") + "}"
}

// Label returns the value of label name, or "".
func (s Series) Label(name string) string {
	for _, l := range s.Labels {
		if l[0] == name {
			return l[1]
		}
	}
	return ""
}

// ParseText parses the Prometheus text format strictly, as far as the
// exporters under test write it: # HELP and # TYPE once per family and
// before its samples (a summary's or histogram's _sum, _count and _bucket
// samples belong to it), samples with optional
// labels and no timestamps, label values with the three escapes (\\, \",
// \n) and no raw line feed, no series twice. It returns the series by Key.
func ParseText(body string) (map[string]Series, error) {
	out := map[string]Series{}
	help := map[string]bool{}
	typed := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("line %d %q: %s", i+1, line, fmt.Sprintf(format, args...))
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, _, _ := strings.Cut(rest, " ")
			if help[name] {
				return nil, fail("second HELP of %s", name)
			}
			help[name] = true
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if typed[name] != "" {
				return nil, fail("second TYPE of %s", name)
			}
			if !slices.Contains([]string{"gauge", "counter", "untyped", "summary", "histogram"}, typ) {
				return nil, fail("type %q", typ)
			}
			typed[name] = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var s Series
		j := strings.IndexAny(line, "{ ")
		if j <= 0 {
			return nil, fail("no metric name")
		}
		s.Name, line = line[:j], line[j:]
		if typed[s.Name] == "" && typed[family(s.Name)] != "summary" && typed[family(s.Name)] != "histogram" {
			return nil, fail("sample of %s before its TYPE", s.Name)
		}
		if line[0] == '{' {
			rest := line[1:]
			for !strings.HasPrefix(rest, "}") {
				eq := strings.Index(rest, `="`)
				if eq <= 0 {
					return nil, fail("bad label")
				}
				name := rest[:eq]
				rest = rest[eq+2:]
				var v strings.Builder
				for {
					if rest == "" {
						return nil, fail("unterminated label value")
					}
					c := rest[0]
					if c == '"' {
						rest = rest[1:]
						break
					}
					if c == '\n' {
						return nil, fail("raw line feed in a label value")
					}
					if c == '\\' {
						if len(rest) < 2 {
							return nil, fail("unterminated escape")
						}
						switch rest[1] {
						case 'n':
							v.WriteByte('\n')
						case '\\', '"':
							v.WriteByte(rest[1])
						default:
							return nil, fail("bad escape \\%c", rest[1])
						}
						rest = rest[2:]
						continue
					}
					v.WriteByte(c)
					rest = rest[1:]
				}
				s.Labels = append(s.Labels, [2]string{name, v.String()})
				rest = strings.TrimPrefix(rest, ",")
			}
			line = rest[1:]
		}
		value, ok := strings.CutPrefix(line, " ")
		if !ok {
			return nil, fail("no space before the value")
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fail("value: %v", err)
		}
		s.Value = v
		if _, dup := out[s.Key()]; dup {
			return nil, fail("series %s twice", s.Key())
		}
		out[s.Key()] = s
	}
	return out, nil
}

// family returns the family a summary's or histogram's sample belongs to.
func family(name string) string {
	for _, suffix := range []string{"_sum", "_count", "_bucket"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base
		}
	}
	return name
}
