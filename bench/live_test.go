package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// liveIdleN is how many idle live sandboxes the live memory figure divides
// by.
const liveIdleN = 8

// maxLiveRounds bounds the measured rounds: a round takes about a second
// here (most of it the pool's refill after a create, waited for untimed),
// and b.Loop's own estimate from its first rounds can overshoot
// -benchtime by half.
const maxLiveRounds = 60

// liveTimeout is the lifetime of the live sandboxes the benchmark makes:
// longer than it runs.
const liveTimeout = 30 * 60

// liveSandbox is a live python sandbox with one code context holding x = 1.
type liveSandbox struct {
	sb  *sandbox.Sandbox
	cid string
}

// newLive makes a live python sandbox on tier with one context in which
// x = 1.
func newLive(ctx context.Context, c *sandbox.Client, tier sandbox.Isolation) (*liveSandbox, error) {
	sb, info, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: tier, TimeoutSeconds: liveTimeout})
	if err != nil {
		return nil, fmt.Errorf("create a %s sandbox: %w", tier, err)
	}
	if info.Tier != string(tier) {
		sb.Kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("sandbox %s on tier %s, want %s", sb.ID, info.Tier, tier)
	}
	cc, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
	if err == nil {
		err = expectCell(ctx, sb, cc.ID, "x = 1", "")
	}
	if err != nil {
		sb.Kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s sandbox %s: %w", tier, sb.ID, err)
	}
	return &liveSandbox{sb: sb, cid: cc.ID}, nil
}

// expectCell runs code in context cid and checks that it raised nothing
// and that its main result's text/plain is want.
func expectCell(ctx context.Context, sb *sandbox.Sandbox, cid, code, want string) error {
	ex, err := sb.RunCode(ctx, cid, code, sandbox.RunCodeOptions{Timeout: execTimeout})
	if err != nil {
		return fmt.Errorf("run %q in context %s: %w", code, cid, err)
	}
	if ex.Error != nil || ex.Text() != want {
		return fmt.Errorf("run %q in context %s: result %q, error %+v; want %q", code, cid, ex.Text(), ex.Error, want)
	}
	return nil
}

// forkCell forks l's context; its after checks that the fork holds x and
// deletes it.
func forkCell(name string, l *liveSandbox) *cell {
	var fork string
	return &cell{
		name: name,
		run: func(ctx context.Context) error {
			cc, err := l.sb.ForkContext(ctx, l.cid)
			if err != nil {
				return fmt.Errorf("fork context %s of %s: %w", l.cid, l.sb.ID, err)
			}
			fork = cc.ID
			return nil
		},
		after: func(ctx context.Context) error {
			if err := expectCell(ctx, l.sb, fork, "x", "1"); err != nil {
				return err
			}
			return l.sb.DeleteContext(ctx, fork)
		},
	}
}

// BenchmarkLive measures live sandboxes (docs/bench.md, "Live sandboxes")
// against a bare python3 spawn measured in the same loop: creating a live
// python sandbox from the warm pool, running x + 1 in a code context over
// HTTP, forking a context on runc and on gVisor; then host memory per idle
// live python sandbox with one context on runc.
//
// Each b.Loop iteration runs every row once, in rotating order, as
// BenchmarkHarness does at concurrency 1, for at most maxLiveRounds rounds
// and -benchtime (make bench gives it 80s); there is no concurrency 8 or
// 32 phase.
func BenchmarkLive(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.Runtime(b, "runc")
	testenv.Runtime(b, "runsc")
	testenv.Corral(b)
	ctx := b.Context()

	pool := warmPool{image: images.HostName, tier: "container", minIdle: 2, maxIdle: 4, system: true}
	// E2B's code-interpreter template runs the python image: its pool.
	testenv.PythonImage(b)
	pyPool := warmPool{image: "python", tier: "container", minIdle: 2, maxIdle: 4, system: true}
	createNA := ""
	srv, err := startServer(b, "live", pool, pyPool)
	if errors.Is(err, errNoPool) {
		createNA = "n/a (pool not available)"
		srv, err = startServer(b, "live")
	}
	if err != nil {
		b.Fatal(err)
	}
	c := sandbox.NewClient(sandbox.Config{Endpoint: srv.url, APIKey: apiKey, Timeout: clientTimeout})
	ctr, err := newLive(ctx, c, sandbox.IsolationContainer)
	if err != nil {
		b.Fatal(err)
	}
	defer ctr.sb.Kill(context.WithoutCancel(ctx))
	gv, err := newLive(ctx, c, sandbox.IsolationGVisor)
	if err != nil {
		b.Fatal(err)
	}
	defer gv.sb.Kill(context.WithoutCancel(ctx))

	port, err := newPortSandbox(ctx, srv, c)
	if err != nil {
		b.Fatal(err)
	}
	defer port.sb.Kill(context.WithoutCancel(ctx))

	var created *sandbox.Sandbox
	create := &cell{
		name: "live: create python sandbox, container (pool)", na: createNA,
		run: func(ctx context.Context) error {
			sb, info, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python",
				Tier: sandbox.IsolationContainer, TimeoutSeconds: liveTimeout})
			if err != nil {
				return fmt.Errorf("create a sandbox: %w", err)
			}
			created = sb
			if info.State != "running" {
				return fmt.Errorf("sandbox %s is %s after its creation", sb.ID, info.State)
			}
			return nil
		},
		after: func(ctx context.Context) error { return created.Kill(ctx) },
	}
	if createNA == "" {
		create.srv, create.pool = srv, pool
	}
	// The stock E2B SDK (node) against the same server: its create and
	// its runCode, to set beside Corral's own.
	e2bCreate := &cell{name: "e2b sdk: Sandbox.create (pool)"}
	e2bRun := &cell{name: "e2b sdk: runCode('x + 1')"}
	nodeRun := &cell{name: "node fetch: x + 1 over /v1 (same sandbox)"}
	drv, err := startE2BDriver(b, srv)
	if err != nil {
		b.Fatal(err)
	}
	if err := drv.do(ctx, "setup"); err != nil {
		b.Fatal(err)
	} else {
		e2bCreate.run = func(ctx context.Context) error { return drv.do(ctx, "create") }
		e2bCreate.after = func(ctx context.Context) error { return drv.do(ctx, "kill") }
		e2bRun.run = func(ctx context.Context) error { return drv.do(ctx, "run") }
		nodeRun.run = func(ctx context.Context) error { return drv.do(ctx, "v1run") }
	}
	if createNA == "" {
		e2bCreate.srv, e2bCreate.pool = srv, pyPool
	} else {
		e2bCreate.na = createNA
	}
	cells := []*cell{
		{name: "bare /usr/bin/python3 -c", run: spawn(helloOut, func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, "/usr/bin/python3", "-c", helloPy)
		})},
		create,
		{name: "live: run x + 1 in a context (HTTP), container", run: func(ctx context.Context) error {
			return expectCell(ctx, ctr.sb, ctr.cid, "x + 1", "2")
		}},
		forkCell("live: fork a context, container", ctr),
		forkCell("live: fork a context, gvisor", gv),
		e2bCreate,
		e2bRun,
		nodeRun,
		{name: "live: GET 1 KiB through a port (header form), container", run: port.get},
	}
	h := &harness{cells: cells}
	if createNA == "" {
		h.warm = []*server{srv}
	}

	// One untimed round checks every row works and warms what it uses.
	for _, c := range h.rotated(0) {
		if err := h.block(ctx, c, 1, 1, 0, true); err != nil {
			b.Fatal(err)
		}
	}
	iters := 0
	for b.Loop() {
		if iters == maxLiveRounds {
			// Enough: the loop's remaining iterations are empty and end
			// it at once.
			continue
		}
		for _, c := range h.rotated(iters) {
			if err := h.block(ctx, c, 1, 1, 0, false); err != nil {
				b.Fatal(err)
			}
		}
		iters++
	}
	// An iteration is a round of every row, or nothing once the rounds
	// are done: the time per iteration means nothing.
	b.ReportMetric(0, "ns/op")

	// The GET through the port against the same GET made inside the
	// sandbox, each in bursts, the bursts alternating: like with like (the
	// rotation's row above has every other row's work between its GETs).
	outside, inside, err := port.paired(ctx, 5, 100)
	if err != nil {
		b.Fatal(err)
	}

	// Memory, with the rows' server and its sandboxes gone.
	drv.stop()
	ctr.sb.Kill(ctx)
	gv.sb.Kill(ctx)
	if err := srv.stop(); err != nil {
		b.Errorf("live server: %v", err)
	}
	mem, err := liveIdleMemory(b)
	if err != nil {
		b.Fatal(err)
	}

	var out bytes.Buffer
	base := map[int]*series{1: cells[0].series(1)}
	var rows []row
	for _, c := range cells {
		r := row{s: &series{name: c.name}, conc: 1, na: c.na}
		if r.na == "" {
			r.s = c.series(1)
			if c.srv != nil && c.claims[1] > 0 {
				r.note = fmt.Sprintf("pool hits %.0f%%", 100*c.hits[1]/c.claims[1])
			}
		}
		rows = append(rows, r)
	}
	fmt.Fprintf(&out, "\nlive sandboxes: %d rounds at concurrency 1\n", iters)
	printTable(&out, base, rows)
	fmt.Fprintf(&out, "GET of 1 KiB in 5 alternating bursts of 100: through the port (header form) from the host p50 %.3f ms; "+
		"inside the sandbox (python urllib, a connection each) p50 %.3f ms\n", float64(outside.Microseconds())/1000, float64(inside.Microseconds())/1000)
	mb := func(v float64) float64 { return v / (1 << 20) }
	fmt.Fprintf(&out, "host memory per idle live python sandbox with one context, runc (%d idle): %.1f MB = %.1f MB its cgroup + %.1f MB host share "+
		"(corral serve RSS %.1f, kernel slab %.1f, page tables %.1f); MemAvailable dropped %.1f MB per sandbox meanwhile\n",
		liveIdleN, mb(mem.accounted()), mb(mem.cgroup), mb(mem.server+mem.slab+mem.pageTables), mb(mem.server), mb(mem.slab), mb(mem.pageTables), mb(mem.available))

	p50 := func(i int) float64 {
		return ratio(float64(cells[i].series(1).median()), float64(cells[0].series(1).median()))
	}
	targets := []struct {
		metric, what string
		v, limit     float64
	}{
		{"live-create/bare-p50", "create a live sandbox (pool) p50 ÷ bare p50", p50(1), 0.5},
		{"live-run/bare-p50", "run x + 1 in a context p50 ÷ bare p50", p50(2), 0.2},
		{"live-fork-ctr/bare-p50", "fork a context, container p50 ÷ bare p50", p50(3), 0.5},
		{"live-fork-gvisor/bare-p50", "fork a context, gvisor p50 ÷ bare p50", p50(4), math.NaN()},
		{"live-idle-MB", "MB per idle live sandbox + context, runc", mb(mem.accounted()), 25},
		{"e2b-create/bare-p50", "E2B SDK Sandbox.create p50 ÷ bare p50", p50(5), 1},
		// Against Corral's own context run called the same way (node's
		// fetch, the same sandbox): what the E2B layer costs.
		{"e2b-run/v1-run-p50", "E2B SDK runCode p50 ÷ /v1 context run (node) p50", ratio(float64(cells[6].series(1).median()), float64(cells[7].series(1).median())), 1.2},
		{"e2b-run/live-run-p50", "E2B SDK runCode p50 ÷ Go SDK context run p50", ratio(float64(cells[6].series(1).median()), float64(cells[2].series(1).median())), math.NaN()},
		{"port-get/inside-p50", "GET through a port p50 ÷ the same GET inside p50", ratio(float64(outside), float64(inside)), 3},
	}
	fmt.Fprintln(&out, "targets (docs/bench.md):")
	for _, t := range targets {
		verdict, v, target := "n/a", "-", "(no target)"
		if !math.IsNaN(t.limit) {
			target = fmt.Sprintf("(target ≤ %.2g)", t.limit)
		}
		if !math.IsNaN(t.v) {
			v = fmt.Sprintf("%.2f", t.v)
			b.ReportMetric(t.v, t.metric)
			switch {
			case math.IsNaN(t.limit):
				verdict = ""
			case t.v <= t.limit:
				verdict = "met"
			default:
				verdict = "missed"
			}
		}
		fmt.Fprintf(&out, "  %-48s %8s  %-16s %s\n", t.what, v, target, verdict)
	}
	b.ReportMetric(float64(cells[0].series(1).median().Microseconds())/1000, "bare-p50-ms")
	os.Stderr.Write(out.Bytes())
}

// liveMemory is host memory per idle live sandbox, in bytes: the sum of
// its parts (accounted), and the drop in MemAvailable (which other
// processes on the machine move too). The parts: the sandbox's cgroup
// (its processes: the agent, the runner's root interpreter, the context),
// and the host's share, which is the growth of corral serve's resident
// memory, of the kernel's unreclaimable slab (mounts, namespaces, the
// loop device of its disk) and of page tables.
type liveMemory struct{ available, cgroup, server, slab, pageTables float64 }

func (m liveMemory) accounted() float64 { return m.cgroup + m.server + m.slab + m.pageTables }

// liveIdleMemory is the host memory one idle live python sandbox on runc
// with one context (holding x = 1) costs, while a server without a pool
// makes liveIdleN of them: their cgroups' memory use, and how much the
// server's resident memory, the kernel's unreclaimable slab and page
// tables grew, divided by liveIdleN (liveMemory). One sandbox made and
// killed first keeps the server's one-time costs (caches, first
// connections) out of the figure.
func liveIdleMemory(b *testing.B) (liveMemory, error) {
	ctx := b.Context()
	s, err := startServer(b, "live-memory")
	if err != nil {
		return liveMemory{}, err
	}
	defer s.stop()
	c := sandbox.NewClient(sandbox.Config{Endpoint: s.url, APIKey: apiKey, Timeout: clientTimeout})
	first, err := newLive(ctx, c, sandbox.IsolationContainer)
	if err != nil {
		return liveMemory{}, err
	}
	if err := first.sb.Kill(ctx); err != nil {
		return liveMemory{}, err
	}
	if err := s.waitTornDown(ctx, 2*time.Minute); err != nil {
		return liveMemory{}, err
	}
	before, err := settledMemAvailable(ctx)
	if err != nil {
		return liveMemory{}, err
	}
	rss0, err := s.rss()
	if err != nil {
		return liveMemory{}, err
	}
	slab0, err := meminfo("SUnreclaim:")
	if err != nil {
		return liveMemory{}, err
	}
	pt0, err := meminfo("PageTables:")
	if err != nil {
		return liveMemory{}, err
	}
	var made []*liveSandbox
	defer func() {
		for _, l := range made {
			l.sb.Kill(context.WithoutCancel(ctx))
		}
	}()
	for range liveIdleN {
		l, err := newLive(ctx, c, sandbox.IsolationContainer)
		if err != nil {
			return liveMemory{}, err
		}
		made = append(made, l)
	}
	after, err := settledMemAvailable(ctx)
	if err != nil {
		return liveMemory{}, err
	}
	rss1, err := s.rss()
	if err != nil {
		return liveMemory{}, err
	}
	slab1, err := meminfo("SUnreclaim:")
	if err != nil {
		return liveMemory{}, err
	}
	pt1, err := meminfo("PageTables:")
	if err != nil {
		return liveMemory{}, err
	}
	dirs, err := oci.SandboxDirs(s.data)
	if err != nil {
		return liveMemory{}, err
	}
	if len(dirs) != liveIdleN {
		return liveMemory{}, fmt.Errorf("%d sandboxes in %s, want %d", len(dirs), s.data, liveIdleN)
	}
	var cg int64
	for _, d := range dirs {
		n, err := cgroup.MemoryUsage("/" + s.cgroup + "/" + filepath.Base(d))
		if err != nil {
			return liveMemory{}, err
		}
		cg += n
	}
	per := func(v int64) float64 { return float64(v) / liveIdleN }
	return liveMemory{available: per(before - after), cgroup: per(cg), server: per(rss1 - rss0), slab: per(slab1 - slab0),
		pageTables: per(pt1 - pt0)}, nil
}

// meminfo is a field of /proc/meminfo, in bytes.
func meminfo(key string) (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return fieldKB(b, key)
}

// portSandbox is a live sandbox made through E2B's API (which gives its
// traffic token) whose python http.server serves a 1 KiB file on port 8000.
type portSandbox struct {
	srv       *server
	sb        *sandbox.Sandbox
	id, token string
	http      *http.Client
}

const portFileScript = `import time, urllib.request, sys
ts = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    urllib.request.urlopen("http://127.0.0.1:8000/f.bin").read()
    ts.append(time.perf_counter() - t0)
ts.sort()
print(int(ts[len(ts) // 2] * 1e6))`

func newPortSandbox(ctx context.Context, srv *server, c *sandbox.Client) (*portSandbox, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", srv.url+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":1800}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("create a sandbox through E2B's API: %w", err)
	}
	defer res.Body.Close()
	var made struct{ SandboxID, TrafficAccessToken string }
	if err := json.NewDecoder(res.Body).Decode(&made); err != nil || res.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("create a sandbox through E2B's API: %d %v", res.StatusCode, err)
	}
	p := &portSandbox{srv: srv, sb: c.Sandbox(made.SandboxID), id: made.SandboxID, token: made.TrafficAccessToken, http: &http.Client{Timeout: clientTimeout}}
	if _, err := p.sb.Files().Write(ctx, "/tmp/www/f.bin", bytes.NewReader(bytes.Repeat([]byte("x"), 1024))); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", p.id, err)
	}
	if _, err := p.sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/tmp/www"}}); err != nil {
		return nil, fmt.Errorf("sandbox %s: start a server: %w", p.id, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.get(ctx)
		if err == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("sandbox %s: the server never answered: %w", p.id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// get GETs the file through Corral's listener, E2B's header form.
func (p *portSandbox) get(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", p.srv.url+"/f.bin", nil)
	if err != nil {
		return err
	}
	req.Header.Set("E2b-Sandbox-Id", p.id)
	req.Header.Set("E2b-Sandbox-Port", "8000")
	req.Header.Set("E2B-Traffic-Access-Token", p.token)
	res, err := p.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	n, err := io.Copy(io.Discard, res.Body)
	if err == nil && (res.StatusCode != http.StatusOK || n != 1024) {
		err = fmt.Errorf("GET through port 8000: %d, %d bytes", res.StatusCode, n)
	}
	return err
}

// paired measures rounds bursts of n GETs through the port and as many
// inside the sandbox, alternating, and returns the median of the former
// and the median of the latter's burst medians.
func (p *portSandbox) paired(ctx context.Context, rounds, n int) (outside, inside time.Duration, err error) {
	var out, in []time.Duration
	for range rounds {
		for range n {
			start := time.Now()
			if err := p.get(ctx); err != nil {
				return 0, 0, err
			}
			out = append(out, time.Since(start))
		}
		d, err := p.inside(ctx, n)
		if err != nil {
			return 0, 0, err
		}
		in = append(in, d)
	}
	slices.Sort(out)
	slices.Sort(in)
	return out[len(out)/2], in[len(in)/2], nil
}

// inside is the median of n GETs of the file made inside the sandbox.
func (p *portSandbox) inside(ctx context.Context, n int) (time.Duration, error) {
	out, errOut, exit, err := p.sb.Run(ctx, sandbox.StartProcessRequest{Cmd: []string{"python3", "-c", portFileScript, strconv.Itoa(n)}})
	if err == nil && (exit == nil || exit.ExitCode != 0) {
		err = fmt.Errorf("exit %+v: %s", exit, errOut)
	}
	if err != nil {
		return 0, fmt.Errorf("GETs inside sandbox %s: %w", p.id, err)
	}
	us, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("GETs inside sandbox %s printed %q", p.id, out)
	}
	return time.Duration(us) * time.Microsecond, nil
}
