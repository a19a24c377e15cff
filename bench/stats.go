package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// series is a set of latency samples and the wall time they took; with
// several executions in flight, wall time is less than their sum.
type series struct {
	name    string
	samples []time.Duration
	wall    time.Duration
}

func (s *series) add(d time.Duration) { s.samples = append(s.samples, d) }

// quantile returns the q-quantile (nearest rank).
func (s *series) quantile(q float64) time.Duration {
	if len(s.samples) == 0 {
		return 0
	}
	x := slices.Clone(s.samples)
	slices.Sort(x)
	i := int(math.Ceil(q*float64(len(x)))) - 1
	return x[min(max(i, 0), len(x)-1)]
}

func (s *series) median() time.Duration { return s.quantile(0.5) }

// throughput is executions per second of wall time.
func (s *series) throughput() float64 {
	if s.wall <= 0 {
		return 0
	}
	return float64(len(s.samples)) / s.wall.Seconds()
}

// row is one line of the results table: a series, or the reason it was
// not measured.
type row struct {
	s    *series
	conc int
	na   string
	note string
}

// ratio is a/b, or NaN when either is unknown.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return math.NaN()
	}
	return a / b
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}

func fx(r float64) string {
	if math.IsNaN(r) {
		return "-"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "x"
}

// printTable prints rows grouped by concurrency; ratios are to base at
// the same concurrency (p50 ÷ base p50, throughput ÷ base throughput).
func printTable(w io.Writer, base map[int]*series, rows []row) {
	fmt.Fprintf(w, "%-48s %4s %9s %9s %9s %9s %9s %9s  %s\n",
		"", "conc", "p50 ms", "p95 ms", "p99 ms", "exec/s", "p50÷bare", "tput÷bare", "")
	line := strings.Repeat("-", 122)
	last := -1
	for _, r := range rows {
		if r.conc != last {
			fmt.Fprintln(w, line)
			last = r.conc
		}
		if r.na != "" {
			fmt.Fprintf(w, "%-48s %4d %9s %9s %9s %9s %9s %9s  %s\n", r.s.name, r.conc, "n/a", "", "", "", "", "", r.na)
			continue
		}
		b := base[r.conc]
		fmt.Fprintf(w, "%-48s %4d %9s %9s %9s %9.1f %9s %9s  %s\n", r.s.name, r.conc,
			ms(r.s.median()), ms(r.s.quantile(0.95)), ms(r.s.quantile(0.99)), r.s.throughput(),
			fx(ratio(float64(r.s.median()), float64(b.median()))), fx(ratio(r.s.throughput(), b.throughput())), r.note)
	}
	fmt.Fprintln(w, line)
}

// sample is one Prometheus sample: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text format and returns the samples of
// metric name.
func parseMetrics(r io.Reader, name string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		s := sample{labels: map[string]string{}}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("metric line %q: no closing brace", line)
			}
			for _, kv := range splitLabels(rest[1:end]) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("metric line %q: label %q", line, kv)
				}
				uq, err := strconv.Unquote(v)
				if err != nil {
					return nil, fmt.Errorf("metric line %q: label %q: %w", line, kv, err)
				}
				s.labels[k] = uq
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metric line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQuote, esc, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, s[start:])
	}
	return out
}

// sum adds the values of the samples whose labels include want.
func sum(samples []sample, want map[string]string) float64 {
	var t float64
	for _, s := range samples {
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
				break
			}
		}
		if match {
			t += s.value
		}
	}
	return t
}
