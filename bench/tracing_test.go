package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/tracing/tracetest"
	"github.com/corralhq/corral/sandbox"
)

// The tracing bench's shape: rounds of tracingBlock at tracingConc, each
// server in turn.
const (
	tracingRounds = 6
	tracingBlock  = 4 * time.Second
	tracingConc   = 8
)

// BenchmarkTracing is the price of tracing (docs/bench.md, "Tracing"): two
// servers alike but for [tracing], one off and one recording every trace
// (sample_ratio 1) and exporting it to a real OTLP receiver on loopback,
// each with a warm container pool with the interpreter, take turns
// running the hello execution at concurrency tracingConc for
// tracingBlock. It reports exec/s with tracing on over off (each side's
// median round), and CPU per execution on over off, and fails if the receiver got no execution's spans. It
// runs once, whatever -benchtime says.
func BenchmarkTracing(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.Runtime(b, "runc")
	testenv.Corral(b)
	done := false
	for b.Loop() {
		if done {
			continue
		}
		done = true
		tracingCost(b)
	}
	b.ReportMetric(0, "ns/op")
}

func tracingCost(b *testing.B) {
	ctx := b.Context()
	pool := warmPool{image: images.HostName, tier: "container", minIdle: tracingConc, maxIdle: 2 * tracingConc, zygote: true}
	off, err := startServer(b, "tracing off", pool)
	if err != nil {
		b.Fatal(err)
	}
	rc := tracetest.Start(b)
	// The server reads it at its start; restored when b ends.
	b.Setenv("CORRAL_TRACING_ENDPOINT", rc.URL)
	on, err := startServer(b, "tracing on", pool)
	if err != nil {
		b.Fatal(err)
	}
	req := sandbox.ExecuteRequest{Language: "python", Code: helloPy, Isolation: sandbox.IsolationContainer,
		Limits: sandbox.Limits{TimeoutMS: execTimeout.Milliseconds()}}
	servers := []*server{off, on}
	rates, cpus := map[*server][]float64{}, map[*server][]float64{}
	for round := -1; round < tracingRounds; round++ { // round -1 warms both up, unmeasured
		order := servers
		if round%2 != 0 {
			order = []*server{on, off}
		}
		for _, s := range order {
			if err := s.waitIdle(ctx, 0, true, 2*time.Minute); err != nil {
				b.Fatal(err)
			}
			r, cpu, err := tracingRate(ctx, s, req)
			if err != nil {
				b.Fatal(err)
			}
			if round >= 0 {
				rates[s], cpus[s] = append(rates[s], r), append(cpus[s], cpu)
			}
		}
	}
	spans := rc.Wait(b, time.Minute, func(spans []tracetest.Span) bool {
		return slices.ContainsFunc(spans, func(s tracetest.Span) bool { return s.Name == "execution.run" })
	})
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	var out bytes.Buffer
	fmt.Fprintf(&out, "tracing (warm container + interpreter, concurrency %d, median of %d rounds of %s; %d spans exported):\n",
		tracingConc, tracingRounds, tracingBlock, len(spans))
	for _, s := range servers {
		fmt.Fprintf(&out, "  %-12s exec/s %6.1f  CPU ms/exec %6.1f  (rounds: exec/s %.1f)\n", s.name, median(rates[s]), median(cpus[s]), rates[s])
	}
	tput, cpu := ratio(median(rates[on]), median(rates[off])), ratio(median(cpus[on]), median(cpus[off]))
	fmt.Fprintf(&out, "  traced/untraced-tput@%d %.2f   traced/untraced-cpu@%d %.2f\n", tracingConc, tput, tracingConc, cpu)
	os.Stderr.Write(out.Bytes())
	b.ReportMetric(tput, fmt.Sprintf("traced/untraced-tput@%d", tracingConc))
	b.ReportMetric(cpu, fmt.Sprintf("traced/untraced-cpu@%d", tracingConc))
}

// tracingRate runs req on s at tracingConc for tracingBlock and returns
// the executions finished per second, and the CPU milliseconds the server
// and its sandboxes used per execution (less swayed than the rate by
// what else runs on the machine).
func tracingRate(ctx context.Context, s *server, req sandbox.ExecuteRequest) (float64, float64, error) {
	cpu0, err := s.cpu()
	if err != nil {
		return 0, 0, err
	}
	var n atomic.Int64
	var first error
	var once sync.Once
	start := time.Now()
	deadline := start.Add(tracingBlock)
	var wg sync.WaitGroup
	for range tracingConc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := s.execute(ctx, req, helloOut); err != nil {
					once.Do(func() { first = err })
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	rate := float64(n.Load()) / time.Since(start).Seconds()
	cpu1, err := s.cpu()
	if err != nil {
		return 0, 0, err
	}
	return rate, float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(max(n.Load(), 1)), first
}
