package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// series is a set of latency samples.
type series struct {
	name    string
	samples []time.Duration
}

func (s *series) add(d time.Duration) { s.samples = append(s.samples, d) }

// quantile returns the q-quantile (nearest rank).
func (s *series) quantile(q float64) time.Duration {
	if len(s.samples) == 0 {
		return 0
	}
	x := slices.Clone(s.samples)
	slices.Sort(x)
	i := int(q*float64(len(x))+0.5) - 1
	return x[min(max(i, 0), len(x)-1)]
}

func (s *series) median() time.Duration { return s.quantile(0.5) }

// table prints the series with their medians and ratios to base.
func table(w io.Writer, base *series, rows ...*series) {
	fmt.Fprintf(w, "%-34s %10s %10s %10s %8s\n", "", "p50", "p95", "n", "÷base")
	fmt.Fprintln(w, strings.Repeat("-", 76))
	for _, s := range append([]*series{base}, rows...) {
		fmt.Fprintf(w, "%-34s %10s %10s %10d %7.2fx\n", s.name,
			s.median().Round(100*time.Microsecond), s.quantile(0.95).Round(100*time.Microsecond),
			len(s.samples), float64(s.median())/float64(base.median()))
	}
}
