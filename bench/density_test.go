package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// densityN is how many idle live python sandboxes, each with one context,
// BenchmarkDensity holds at once; densityMarks are the counts at which it
// measures memory; densityEdge is how many creates at each end make the
// create p50 "at 1" and "at densityN".
const (
	densityN      = 500
	densityEdge   = 20
	densityBudget = 25 * time.Minute
)

var densityMarks = []int{100, densityN}

// densityMemory is host memory per idle live sandbox at one count: the
// sum of its parts (liveMemory's: the sandboxes' cgroups, and how much
// corral serve's resident memory, the kernel's unreclaimable slab and page
// tables grew since the server's first, killed, sandbox), and the drop in
// MemAvailable over the same span.
type densityMemory struct {
	n   int
	mem liveMemory
}

// hostMark is what liveMemory's host share is measured from.
type hostMark struct{ avail, rss, slab, pt int64 }

func readHostMark(s *server) (hostMark, error) {
	var m hostMark
	var err error
	if m.avail, err = memAvailable(); err != nil {
		return m, err
	}
	if m.rss, err = s.rss(); err != nil {
		return m, err
	}
	if m.slab, err = meminfo("SUnreclaim:"); err != nil {
		return m, err
	}
	m.pt, err = meminfo("PageTables:")
	return m, err
}

// BenchmarkDensity is how many idle live python sandboxes one host holds
// (docs/bench.md, "Density"): a server without a pool makes densityN live
// python sandboxes on runc, one after another, each with one context
// holding x = 1, and keeps them all. It reports host memory per sandbox at
// 100 and at densityN, and the p50 of a sandbox's create (POST
// /v1/sandboxes until running) and of its context's (create, then x = 1)
// over the first and the last densityEdge: whether creates stay fast as
// the sandboxes add up. It runs once, whatever -benchtime says, and fails
// rather than stop short of densityN.
func BenchmarkDensity(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.Runtime(b, "runc")
	testenv.Corral(b)
	done := false
	for b.Loop() {
		if done {
			continue
		}
		done = true
		density(b)
	}
	b.ReportMetric(0, "ns/op")
}

func density(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), densityBudget)
	defer cancel()
	s, err := startServer(b, "density")
	if err != nil {
		b.Fatal(err)
	}
	defer s.stop()
	c := sandbox.NewClient(sandbox.Config{Endpoint: s.url, APIKey: apiKey, Timeout: clientTimeout})
	var made []*liveSandbox
	defer func() {
		// Untimed, after the figures: one after another, as an operator's
		// script would.
		for _, l := range made {
			l.sb.Kill(context.WithoutCancel(ctx))
		}
	}()
	// The server's one-time costs (caches, first connections) stay out.
	first, err := newLive(ctx, c, sandbox.IsolationContainer)
	if err != nil {
		b.Fatal(err)
	}
	if err := first.sb.Kill(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.waitTornDown(ctx, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	if _, err := settledMemAvailable(ctx); err != nil {
		b.Fatal(err)
	}
	base, err := readHostMark(s)
	if err != nil {
		b.Fatal(err)
	}
	creates := make([]time.Duration, 0, densityN)
	contexts := make([]time.Duration, 0, densityN)
	var mems []densityMemory
	start := time.Now()
	for len(made) < densityN {
		t0 := time.Now()
		sb, info, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python",
			Tier: sandbox.IsolationContainer, TimeoutSeconds: int64(densityBudget.Seconds()) + liveTimeout})
		if err != nil {
			b.Fatalf("sandbox %d of %d (after %s): %v", len(made)+1, densityN, time.Since(start).Round(time.Second), err)
		}
		t1 := time.Now()
		l := &liveSandbox{sb: sb}
		made = append(made, l)
		if info.State != "running" {
			b.Fatalf("sandbox %d of %d is %s after its creation", len(made), densityN, info.State)
		}
		cc, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
		if err == nil {
			l.cid = cc.ID
			err = expectCell(ctx, sb, cc.ID, "x = 1", "")
		}
		if err != nil {
			b.Fatalf("sandbox %d of %d: %v", len(made), densityN, err)
		}
		creates = append(creates, t1.Sub(t0))
		contexts = append(contexts, time.Since(t1))
		if len(made) == densityMarks[len(mems)] {
			m, err := densityAt(ctx, s, base, len(made))
			if err != nil {
				b.Fatal(err)
			}
			mems = append(mems, m)
		}
	}
	took := time.Since(start)
	// Every sandbox still holds its context's state.
	for i, l := range made {
		if err := expectCell(ctx, l.sb, l.cid, "x", "1"); err != nil {
			b.Fatalf("sandbox %d of %d after all were made: %v", i+1, densityN, err)
		}
	}

	p50 := func(d []time.Duration) time.Duration { return (&series{samples: d}).median() }
	c1, cN := p50(creates[:densityEdge]), p50(creates[densityN-densityEdge:])
	x1, xN := p50(contexts[:densityEdge]), p50(contexts[densityN-densityEdge:])
	var out bytes.Buffer
	mb := func(v float64) float64 { return v / (1 << 20) }
	fmt.Fprintf(&out, "\ndensity: %d idle live python sandboxes on runc, each with one context (x = 1), made one after another in %s\n",
		densityN, took.Round(time.Second))
	for _, m := range mems {
		fmt.Fprintf(&out, "  at %3d: %.1f MB per sandbox = %.1f MB its cgroup + %.1f MB host share (corral serve RSS %.1f, kernel slab %.1f, page tables %.1f); MemAvailable dropped %.1f MB per sandbox\n",
			m.n, mb(m.mem.accounted()), mb(m.mem.cgroup), mb(m.mem.server+m.mem.slab+m.mem.pageTables),
			mb(m.mem.server), mb(m.mem.slab), mb(m.mem.pageTables), mb(m.mem.available))
		b.ReportMetric(mb(m.mem.accounted()), fmt.Sprintf("MB/sandbox@%d", m.n))
	}
	fmt.Fprintf(&out, "  create p50: %s ms over the first %d, %s ms over the last %d (%.2fx); context + x = 1 p50: %s ms, %s ms (%.2fx)\n",
		ms(c1), densityEdge, ms(cN), densityEdge, ratio(float64(cN), float64(c1)), ms(x1), ms(xN), ratio(float64(xN), float64(x1)))
	b.ReportMetric(float64(c1.Microseconds())/1000, "create-p50-ms@1")
	b.ReportMetric(float64(cN.Microseconds())/1000, fmt.Sprintf("create-p50-ms@%d", densityN))
	b.ReportMetric(ratio(float64(cN), float64(c1)), fmt.Sprintf("create-p50@%d/@1", densityN))
	os.Stderr.Write(out.Bytes())
}

// densityAt measures host memory per sandbox with n live sandboxes made
// since base.
func densityAt(ctx context.Context, s *server, base hostMark, n int) (densityMemory, error) {
	if _, err := settledMemAvailable(ctx); err != nil {
		return densityMemory{}, err
	}
	now, err := readHostMark(s)
	if err != nil {
		return densityMemory{}, err
	}
	dirs, err := oci.SandboxDirs(s.data)
	if err != nil {
		return densityMemory{}, err
	}
	if len(dirs) != n {
		return densityMemory{}, fmt.Errorf("%d sandboxes in %s, want %d", len(dirs), s.data, n)
	}
	var cg int64
	for _, d := range dirs {
		v, err := cgroup.MemoryUsage("/" + s.cgroup + "/" + filepath.Base(d))
		if err != nil {
			return densityMemory{}, err
		}
		cg += v
	}
	per := func(v int64) float64 { return float64(v) / float64(n) }
	return densityMemory{n: n, mem: liveMemory{available: per(base.avail - now.avail), cgroup: per(cg),
		server: per(now.rss - base.rss), slab: per(now.slab - base.slab), pageTables: per(now.pt - base.pt)}}, nil
}
