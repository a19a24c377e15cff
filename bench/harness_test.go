package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

const (
	helloPy  = "print(sum(range(100)))"
	helloOut = "4950\n"
	numpyPy  = "import numpy as np; print(np.arange(10).sum())"
	numpyOut = "45\n"
	// idleN is how many idle pooled sandboxes the memory figure divides by.
	idleN = 16
	// maxPerCell and cellBudget bound each cell at concurrency 8 and 32:
	// at most that many executions, none started after that much time.
	maxPerCell = 160
	cellBudget = 10 * time.Second
)

// concurrencies are the loads cells are measured at: every cell at 1, 8
// and 32; only the scaling cells (the baseline and the warm container
// rows) at 2 and 4, where a 2-core machine turns from idle to saturated.
var concurrencies = []int{1, 2, 4, 8, 32}

// scalingOnly are the concurrencies only scaling cells are measured at.
var scalingOnly = map[int]bool{2: true, 4: true}

// cell is one row group of the table: one way of running a program once.
type cell struct {
	name string
	run  func(ctx context.Context) error
	// na, when set, is why the cell is not measured.
	na string
	// serial cells run at concurrency 1 only.
	serial string
	// after, if set, runs untimed after each execution: it checks and
	// undoes what the execution made (a sandbox created, a context
	// forked).
	after func(ctx context.Context) error
	// srv and pool are a warm cell's server and the pool its requests
	// should hit; req and want its request and the output it expects.
	srv  *server
	pool warmPool
	req  sandbox.ExecuteRequest
	want string
	// host is a cold cell's server.
	host *server
	// scaling cells are measured at every concurrency, the others not at
	// scalingOnly's.
	scaling bool
	// cpu, if set, reads a counter of the CPU time the cell's executions
	// use: measured in the CPU phase (harness.cpuPhase) over each block,
	// up to when what the block started has settled (the pool's resets
	// and refill, the cold server's teardown), less the server's standing
	// CPU over that time.
	cpu func() (time.Duration, error)

	byConc       map[int]*series
	hits, claims map[int]float64
	cpuUsed      map[int]time.Duration
	cpuN         map[int]int
	// cpuWall is the wall time of the CPU phase's blocks: with cpuN, the
	// exec/s of a server holding its pool alone (harness.measureCPU).
	cpuWall map[int]time.Duration
}

// at reports whether c is measured at concurrency conc.
func (c *cell) at(conc int) bool {
	return (c.serial == "" || conc == 1) && (c.scaling || !scalingOnly[conc])
}

// aloneThroughput is c's exec/s at conc in the CPU phase, where its
// server ran alone, or NaN.
func (c *cell) aloneThroughput(conc int) float64 {
	c.series(conc)
	if c.cpuN[conc] == 0 || c.cpuWall[conc] <= 0 {
		return math.NaN()
	}
	return float64(c.cpuN[conc]) / c.cpuWall[conc].Seconds()
}

// cpuPerExec is the CPU time one execution of c used at conc, or NaN.
func (c *cell) cpuPerExec(conc int) float64 {
	c.series(conc)
	n := c.cpuN[conc]
	if c.cpu == nil || n == 0 {
		return math.NaN()
	}
	return float64(c.cpuUsed[conc]) / float64(n)
}

func (c *cell) series(conc int) *series {
	if c.byConc == nil {
		c.byConc = map[int]*series{}
		c.hits, c.claims = map[int]float64{}, map[int]float64{}
		c.cpuUsed = map[int]time.Duration{}
		c.cpuN = map[int]int{}
		c.cpuWall = map[int]time.Duration{}
	}
	s := c.byConc[conc]
	if s == nil {
		s = &series{name: c.name}
		c.byConc[conc] = s
	}
	return s
}

// poolClaims reads the warm pool's hit and miss counters.
func (c *cell) poolClaims(ctx context.Context) (hit, miss float64, err error) {
	lbl := map[string]string{"tier": c.pool.tier, "image": c.pool.image, "result": "hit"}
	if hit, err = c.srv.metric(ctx, "corral_pool_claims_total", lbl); err != nil {
		return 0, 0, err
	}
	lbl["result"] = "miss"
	miss, err = c.srv.metric(ctx, "corral_pool_claims_total", lbl)
	return hit, miss, err
}

// harness runs cells side by side.
type harness struct {
	cells []*cell
	// warm are the servers with pools: before each measurement their pools
	// are back at their minimum, so no cell pays for another's refill.
	warm []*server
	// cold is the server without a pool: before each measurement it has
	// torn down every sandbox (it does so after answering), so no cell
	// pays for another's teardown.
	cold *server
	// cpuPhase: blocks measure CPU time (cell.cpu) instead of latency.
	cpuPhase bool
	// measured are the CPU phase's servers, stopped once measured.
	measured []*server
}

// standing is the CPU a cell's server uses per second when idle (its
// pool's sandboxes waiting, its own timers), measured before the CPU
// phase; 0 for a cell without a server.
func (c *cell) standing() float64 {
	switch {
	case c.srv != nil:
		return c.srv.standing
	case c.host != nil:
		return c.host.standing
	}
	return 0
}

// execTimeout bounds one execution of any cell. A client waits longer
// (clientTimeout): under load an execution's wait for a sandbox comes on
// top, and Corral's own verdict should arrive first.
const (
	execTimeout   = 2 * time.Minute
	clientTimeout = execTimeout + 5*time.Minute
)

// block runs up to n executions of c with up to conc in flight, starting
// no new one after budget (when budget > 0), and adds them to c's series
// at conc unless it is a warm-up.
func (h *harness) block(ctx context.Context, c *cell, conc, n int, budget time.Duration, warmup bool) error {
	if h.cold != nil {
		if err := h.cold.waitTornDown(ctx, 2*time.Minute); err != nil {
			return err
		}
	}
	for _, s := range h.warm {
		if err := s.waitIdle(ctx, 0, conc > 1, 2*time.Minute); err != nil {
			return err
		}
	}
	var hit0, miss0 float64
	if c.srv != nil {
		var err error
		if hit0, miss0, err = c.poolClaims(ctx); err != nil {
			return err
		}
	}
	var cpu0 time.Duration
	t0 := time.Now()
	if h.cpuPhase && !warmup {
		if c.cpu == nil {
			return nil
		}
		var err error
		if cpu0, err = c.cpu(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		lat  []time.Duration
	)
	start := time.Now()
	for range min(conc, n) {
		wg.Go(func() {
			for ctx.Err() == nil && int(next.Add(1)) <= n && (budget <= 0 || time.Since(start) < budget) {
				ectx, ecancel := context.WithTimeout(ctx, clientTimeout)
				t0 := time.Now()
				err := c.run(ectx)
				d := time.Since(t0)
				if err == nil && c.after != nil {
					err = c.after(ectx)
				}
				ecancel()
				if err != nil {
					cancel(fmt.Errorf("%s (concurrency %d): %w", c.name, conc, err))
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if warmup {
		return nil
	}
	s := c.series(conc)
	if h.cpuPhase {
		// What the executions left to do (resets, refill, teardown) is
		// theirs too; what the server uses anyway, idle, is not.
		if err := h.settle(ctx, c); err != nil {
			return err
		}
		cpu1, err := c.cpu()
		if err != nil {
			return err
		}
		idle := time.Duration(c.standing() * float64(time.Since(t0)))
		c.cpuUsed[conc] += cpu1 - cpu0 - idle
		c.cpuN[conc] += len(lat)
		c.cpuWall[conc] += wall
		return nil
	}
	s.samples = append(s.samples, lat...)
	s.wall += wall
	if c.srv != nil {
		hit, miss, err := c.poolClaims(ctx)
		if err != nil {
			return err
		}
		c.hits[conc] += hit - hit0
		c.claims[conc] += hit - hit0 + miss - miss0
	}
	return nil
}

// cpuConcurrencies are the loads CPU per execution is measured at.
var cpuConcurrencies = []int{1, 2, 4, 8}

// cpuBlock is how many executions a CPU block runs at conc, and cpuRounds
// how many blocks each cell runs there, rotated with the other cells'.
func cpuBlock(conc int) int { return min(max(30, 15*conc), maxPerCell) }

const cpuRounds = 3

// measureCPU is the CPU phase: each server's standing CPU, then blocks of
// cpuBlock executions of every cell that counts CPU, their wall time
// giving exec/s too. The warm servers of the latency phases hold several
// pools each, whose idle sandboxes' CPU (a gVisor pool's above all: each
// Sentry keeps its timers running) would count against another pool's
// executions and slow them: here each warm cell gets a server of its own
// with its pool alone. It runs in two groups: first the scaling cells (the
// warm container rows, at every concurrency) beside the bare spawn, with
// no other warm server running, as a user's server with the embedded
// defaults runs (container pools only); then the others, whose servers
// (gVisor pools among them) start only after.
func (h *harness) measureCPU(b *testing.B, ctx context.Context) error {
	for _, s := range h.warm {
		if err := s.stop(); err != nil {
			return fmt.Errorf("%s server: %w", s.name, err)
		}
	}
	h.warm = nil
	scaling := func(c *cell) bool { return c.scaling }
	for _, group := range []func(c *cell) bool{scaling, func(c *cell) bool { return !scaling(c) }} {
		if err := h.cpuGroup(b, ctx, group); err != nil {
			return err
		}
	}
	return nil
}

// cpuGroup measures the cells in (and the bare spawn, the baseline of
// every group) with a server of their own each, which it stops after.
func (h *harness) cpuGroup(b *testing.B, ctx context.Context, in func(c *cell) bool) error {
	var cells []*cell
	for _, c := range h.cells {
		if c.cpu == nil || c.na != "" || (c != h.cells[0] && !in(c)) {
			continue
		}
		cells = append(cells, c)
		if c.srv == nil {
			continue
		}
		s, err := startServer(b, "cpu "+c.name, c.pool)
		if err != nil {
			return err
		}
		c.srv, c.cpu = s, s.cpu
		c.run = func(ctx context.Context) error { return s.execute(ctx, c.req, c.want) }
		h.warm = append(h.warm, s)
		h.measured = append(h.measured, s)
	}
	defer func() {
		for _, s := range h.warm {
			s.stop()
		}
		h.warm = nil
	}()
	servers := h.warm
	if h.cold != nil {
		servers = append([]*server{h.cold}, servers...)
	}
	for _, s := range servers {
		if err := s.measureStanding(ctx, standingWindow); err != nil {
			return err
		}
	}
	h.cpuPhase = true
	defer func() { h.cpuPhase = false }()
	for _, conc := range cpuConcurrencies {
		for _, c := range cells {
			if c.srv == nil || !c.at(conc) {
				continue
			}
			if err := h.grow(ctx, c, conc); err != nil {
				return err
			}
		}
		for r := range cpuRounds {
			for _, c := range rotate(cells, r) {
				if !c.at(conc) {
					continue
				}
				if err := h.block(ctx, c, conc, cpuBlock(conc), cellBudget, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// grow runs c untimed at conc until its pool holds what that load needs:
// a block that made no sandbox. A pool grows with its tenant's concurrency
// (about two sandboxes per execution in flight, docs/pool.md), and each
// sandbox made costs as much CPU as ten warm executions: the CPU phase
// measures warm executions, not the growth.
func (h *harness) grow(ctx context.Context, c *cell, conc int) error {
	const maxBlocks = 8
	for range maxBlocks {
		before, err := oci.SandboxDirs(c.srv.data)
		if err != nil {
			return err
		}
		if err := h.block(ctx, c, conc, max(4*conc, 10), cellBudget, true); err != nil {
			return err
		}
		if err := h.settle(ctx, c); err != nil {
			return err
		}
		after, err := oci.SandboxDirs(c.srv.data)
		if err != nil {
			return err
		}
		if len(after) <= len(before) {
			return nil
		}
	}
	return fmt.Errorf("%s: its pool still grew after %d warm-up blocks at concurrency %d", c.name, maxBlocks, conc)
}

// standingWindow is how long a server's standing CPU is measured over.
const standingWindow = 3 * time.Second

// settle waits until what c's executions started is done: its pool's
// resets and refill, or the cold server's teardowns.
func (h *harness) settle(ctx context.Context, c *cell) error {
	switch {
	case c.srv != nil:
		return c.srv.waitIdle(ctx, 0, true, 2*time.Minute)
	case c.host != nil:
		return c.host.waitTornDown(ctx, 2*time.Minute)
	}
	return nil
}

// rotated returns the measurable cells starting at the k-th, so that no
// cell always runs right after the same neighbour.
func (h *harness) rotated(k int) []*cell {
	var live []*cell
	for _, c := range h.cells {
		if c.na == "" {
			live = append(live, c)
		}
	}
	return rotate(live, k)
}

// rotate returns cells starting at the k-th.
func rotate(cells []*cell, k int) []*cell {
	if len(cells) == 0 {
		return nil
	}
	k %= len(cells)
	return append(slices.Clone(cells[k:]), cells[:k]...)
}

// BenchmarkHarness is the warm-pool benchmark of docs/bench.md: python hello run
// bare, under bubblewrap, with runc and runsc on a hand-made bundle, and
// through Corral's HTTP API cold and warm on both tiers; numpy warm
// against the same program chrooted into the python image; then host
// memory per idle pooled sandbox. See docs/bench.md.
//
// Each b.Loop iteration runs every cell once at concurrency 1, in rotating
// order, so that noise on this machine hits all of them alike (-benchtime
// bounds this phase: make bench gives it 80s). After the loop, every cell
// runs ceil(8/3 × iterations) executions (at most maxPerCell, started
// within cellBudget) at concurrency 8 and then at 32, interleaved in
// blocks.
func BenchmarkHarness(b *testing.B) {
	testenv.RequireRoot(b)
	runc := testenv.Runtime(b, "runc")
	runsc := testenv.Runtime(b, "runsc")
	testenv.Corral(b)
	ctx := b.Context()

	// A generous timeout: 32 numpy imports on two busy cores can take
	// longer than the default 30 s, and a timeout would end the run.
	limits := sandbox.Limits{TimeoutMS: execTimeout.Milliseconds()}
	hello := func(tier sandbox.Isolation) sandbox.ExecuteRequest {
		return sandbox.ExecuteRequest{Language: "python", Code: helloPy, Isolation: tier, Limits: limits}
	}
	numpy := func(tier sandbox.Isolation) sandbox.ExecuteRequest {
		return sandbox.ExecuteRequest{Language: "python", Image: "python", Code: numpyPy, Isolation: tier, Limits: limits}
	}
	via := func(s *server, req sandbox.ExecuteRequest, want string) func(context.Context) error {
		return func(ctx context.Context) error { return s.execute(ctx, req, want) }
	}

	// Baselines.
	bundle, err := handBundle(b.TempDir(), []string{"/usr/bin/python3", "-c", helloPy}, "")
	if err != nil {
		b.Fatal(err)
	}
	runcState, runscState := b.TempDir(), b.TempDir()
	// runsc pins an empty network namespace under its root (null-netns):
	// unmount it before the directory is removed.
	b.Cleanup(func() {
		for unix.Unmount(filepath.Join(runscState, "null-netns"), unix.MNT_DETACH) == nil {
		}
	})
	var ids atomic.Int64
	id := func() string { return fmt.Sprintf("bench-%d-%d", os.Getpid(), ids.Add(1)) }
	pyRoot := pythonRootfs(b)
	cliData := b.TempDir()

	var bareCPU atomic.Int64
	cells := []*cell{
		{name: "bare /usr/bin/python3 -c", scaling: true, run: spawnCPU(helloOut, &bareCPU, func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, "/usr/bin/python3", "-c", helloPy)
		}), cpu: func() (time.Duration, error) { return time.Duration(bareCPU.Load()), nil }},
		{name: "bwrap (unshare-all, ro /usr)", run: spawn(helloOut, func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, "bwrap", append(bwrapArgs(), "/usr/bin/python3", "-c", helloPy)...)
		})},
		{name: "runc run (hand-made bundle)", run: spawn(helloOut, func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, runc, "--root", runcState, "run", "--bundle", bundle, id())
		})},
		{name: "runsc run (hand-made bundle)", run: spawn(helloOut, func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, runsc, "--root", runscState, "--network=none", "--overlay2=none",
				"run", "--bundle", bundle, id())
		})},
		// The one-shot CLI: a fresh engine per execution, no server. Each
		// start reaps what it finds in its data directory, so concurrent
		// runs on one directory would reap each other.
		{name: "corral run (cold, CLI, container)", serial: "n/a (one-shot CLI: concurrency 1 only)", run: spawn(helloOut, func(ctx context.Context) *exec.Cmd {
			cmd := exec.CommandContext(ctx, testenv.Corral(b), "run", "--lang", "python", "--isolation", "container", "-")
			cmd.Stdin, cmd.Stderr = strings.NewReader(helloPy), io.Discard
			cmd.Env = append(os.Environ(), "CORRAL_DATA_DIR="+cliData, "CORRAL_CGROUP_PARENT="+testenv.CgroupParent,
				"CORRAL_CACHE_DIR="+testenv.CacheDir())
			return cmd
		})},
	}

	// Corral, cold: a server without a pool.
	cold, err := startServer(b, "cold")
	if err != nil {
		b.Fatal(err)
	}
	baseRSS, err := cold.rss()
	if err != nil {
		b.Fatal(err)
	}
	cells = append(cells,
		&cell{name: "corral cold, container", run: via(cold, hello(sandbox.IsolationContainer), helloOut), host: cold, cpu: cold.cpu},
		&cell{name: "corral cold, gvisor", run: via(cold, hello(sandbox.IsolationGVisor), helloOut), host: cold, cpu: cold.cpu},
	)

	// Corral, warm: one server per interpreter setting, since a request
	// cannot choose whether its pooled sandbox runs one.
	h := &harness{cold: cold}
	poolNA := ""
	warmCells := func(zygote bool, label string, extra ...warmPool) []*cell {
		pools := []warmPool{
			{image: images.HostName, tier: "container", minIdle: 4, maxIdle: 32, zygote: zygote},
			{image: images.HostName, tier: "gvisor", minIdle: 4, maxIdle: 32, zygote: zygote},
		}
		pools = append(pools, extra...)
		var srv *server
		if poolNA == "" {
			srv, err = startServer(b, "warm"+label, pools...)
			switch {
			case errors.Is(err, errNoPool):
				poolNA = "n/a (pool not available)"
			case err != nil:
				b.Fatal(err)
			default:
				h.warm = append(h.warm, srv)
			}
		}
		var out []*cell
		for _, p := range pools {
			name := fmt.Sprintf("corral warm, %s%s", p.tier, label)
			req, want := hello(sandbox.Isolation(p.tier)), helloOut
			if p.image == "python" {
				name = fmt.Sprintf("numpy: corral warm, %s%s", p.tier, label)
				req, want = numpy(sandbox.Isolation(p.tier)), numpyOut
			}
			c := &cell{name: name, na: poolNA, pool: p}
			if poolNA == "" {
				c.srv, c.run, c.cpu, c.req, c.want = srv, via(srv, req, want), srv.cpu, req, want
				c.scaling = p.tier == "container" && p.image == images.HostName
			}
			out = append(out, c)
		}
		return out
	}
	cells = append(cells, warmCells(false, "")...)
	warmInterp := warmCells(true, ", interpreter",
		warmPool{image: "python", tier: "container", minIdle: 4, maxIdle: 32, zygote: true, preload: []string{"numpy"}})
	cells = append(cells, warmInterp[:2]...)

	// numpy: the same program chrooted into the python image, cold through
	// Corral, and warm with numpy preloaded.
	cells = append(cells,
		&cell{name: "numpy: bare chroot (python image)", run: spawn(numpyOut, func(ctx context.Context) *exec.Cmd {
			cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", numpyPy)
			cmd.Dir = "/"
			cmd.Env = pyRoot.env
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: pyRoot.dir, Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
			return cmd
		})},
		&cell{name: "numpy: corral cold, container", run: via(cold, numpy(sandbox.IsolationContainer), numpyOut)},
	)
	warmInterp[2].name = "numpy: corral warm, container, numpy preloaded"
	cells = append(cells, warmInterp[2])
	h.cells = cells

	// One untimed round fills caches and checks every cell works.
	for _, c := range h.rotated(0) {
		if err := c.run(ctx); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}

	iters := 0
	for b.Loop() {
		for _, c := range h.rotated(iters) {
			if err := h.block(ctx, c, 1, 1, 0, false); err != nil {
				b.Fatal(err)
			}
		}
		iters++
	}
	n := min((iters*8+2)/3, maxPerCell)
	for _, conc := range concurrencies[1:] {
		// A warm pool follows demand: before measuring a concurrency,
		// each warm cell runs untimed at it until its pool has grown to
		// what that load needs (steady state, not the growth).
		for _, c := range h.rotated(0) {
			if c.srv == nil || !c.at(conc) {
				continue
			}
			if err := h.block(ctx, c, conc, 3*conc, cellBudget, true); err != nil {
				b.Fatal(err)
			}
		}
		rounds := min(max(n/(4*conc), 1), 5)
		for r := range rounds {
			size := n / rounds
			if r == rounds-1 {
				size = n - size*(rounds-1)
			}
			for _, c := range h.rotated(r) {
				if !c.at(conc) {
					continue
				}
				if err := h.block(ctx, c, conc, size, cellBudget/time.Duration(rounds), false); err != nil {
					b.Fatal(err)
				}
			}
		}
	}

	// CPU per execution, in blocks of its own: a block of one execution (as
	// at concurrency 1 above) would count the wait for its settling, and
	// the servers' standing CPU over it, as much as the execution.
	if err := h.measureCPU(b, ctx); err != nil {
		b.Fatal(err)
	}

	// Host memory per idle pooled sandbox, with nothing else running.
	for _, s := range h.warm {
		if err := s.stop(); err != nil {
			b.Errorf("%s server: %v", s.name, err)
		}
	}
	type memRow struct {
		name   string
		tier   string
		zygote bool
		bytes  float64
	}
	mems := []memRow{
		{name: "runc", tier: "container"}, {name: "runc, interpreter", tier: "container", zygote: true},
		{name: "runsc", tier: "gvisor"}, {name: "runsc, interpreter", tier: "gvisor", zygote: true},
	}
	for i := range mems {
		mems[i].bytes = math.NaN()
		if poolNA != "" {
			continue
		}
		v, err := idleMemory(b, mems[i].tier, mems[i].zygote, baseRSS)
		if err != nil {
			b.Fatal(err)
		}
		mems[i].bytes = v
	}

	// The table.
	base := map[int]*series{}
	var rows []row
	for _, conc := range concurrencies {
		base[conc] = cells[0].series(conc)
		for _, c := range cells {
			if !c.scaling && scalingOnly[conc] {
				continue
			}
			r := row{s: &series{name: c.name}, conc: conc, na: c.na}
			if c.serial != "" && conc > 1 {
				r.na = c.serial
			}
			if r.na == "" {
				r.s = c.series(conc)
				if c.srv != nil && c.claims[conc] > 0 {
					r.note = fmt.Sprintf("pool hits %.0f%%", 100*c.hits[conc]/c.claims[conc])
				}
			}
			rows = append(rows, r)
		}
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "\nwarm-pool harness: %d rounds at concurrency 1; at 8 and 32 each cell runs up to %d executions started within %s\n", iters, n, cellBudget)
	printTable(&out, base, rows)
	fmt.Fprintf(&out, "host memory per idle pooled sandbox (%d idle, MemAvailable drop less corral serve's own %.0f MB):\n", idleN, float64(baseRSS)/(1<<20))
	for _, m := range mems {
		v := "n/a (pool not available)"
		if !math.IsNaN(m.bytes) {
			v = fmt.Sprintf("%.1f MB", m.bytes/(1<<20))
		}
		fmt.Fprintf(&out, "  %-20s %s\n", m.name, v)
	}

	// CPU per execution, beside the bare spawn's at the same concurrency.
	fmt.Fprintf(&out, "CPU per execution, ms, in blocks of %d executions at concurrency 1 and %d per concurrent client above (bare: the spawned process tree; corral: corral serve with the runc/runsc it waited for, and its sandboxes' cgroups, up to when the pool's resets and refill or the teardowns are done, less the server's standing CPU over that time), and ÷ bare at the same concurrency:\n", cpuBlock(1), cpuBlock(2)/2)
	for _, conc := range cpuConcurrencies {
		for _, c := range cells {
			if c.cpu == nil || !c.at(conc) || c.na != "" {
				continue
			}
			v := c.cpuPerExec(conc)
			fmt.Fprintf(&out, "  %-48s %4d %9.1f %9s\n", c.name, conc, v/float64(time.Millisecond), fx(ratio(v, cells[0].cpuPerExec(conc))))
		}
	}

	fmt.Fprintln(&out, "exec/s in the same blocks, each warm server running alone with its pool (the throughput targets' figures), and ÷ bare at the same concurrency:")
	for _, conc := range cpuConcurrencies {
		for _, c := range cells {
			if !c.scaling || c.cpu == nil || c.na != "" {
				continue
			}
			v := c.aloneThroughput(conc)
			fmt.Fprintf(&out, "  %-48s %4d %9.1f %9s\n", c.name, conc, v, fx(ratio(v, cells[0].aloneThroughput(conc))))
		}
	}

	fmt.Fprintln(&out, "standing CPU of each server, idle with its pool (ms per second, subtracted above):")
	for _, s := range append([]*server{cold}, h.measured...) {
		fmt.Fprintf(&out, "  %-48s %9.1f\n", s.name, 1000*s.standing)
	}

	// The targets, as ratios of this run.
	p50 := func(name string, conc int) float64 { return float64(find(cells, name).series(conc).median()) }
	// Throughput targets are the CPU phase's, each server alone (above).
	tput := func(name string, conc int) float64 { return find(cells, name).aloneThroughput(conc) }
	cpu := func(name string, conc int) float64 { return find(cells, name).cpuPerExec(conc) }
	const interp = "corral warm, container, interpreter"
	targets := []struct {
		metric, what string
		v, limit     float64
		atMost       bool
	}{
		{"warm-ctr/bare-p50", "warm container p50 ÷ bare spawn p50", ratio(p50("corral warm, container", 1), p50(cells[0].name, 1)), 1.1, true},
		{"warm-ctr-interp/bare-p50", "warm container + interpreter p50 ÷ bare p50", ratio(p50("corral warm, container, interpreter", 1), p50(cells[0].name, 1)), 0.5, true},
		{"numpy-warm/numpy-chroot-p50", "numpy warm p50 ÷ numpy bare chroot p50", ratio(p50(warmInterp[2].name, 1), p50("numpy: bare chroot (python image)", 1)), 0.3, true},
		{"warm-gvisor/warm-ctr-p50", "warm gvisor p50 ÷ warm container p50", ratio(p50("corral warm, gvisor", 1), p50("corral warm, container", 1)), 1.5, true},
		{"warm-ctr/bare-tput@8", "warm container exec/s ÷ bare exec/s at 8", ratio(tput("corral warm, container", 8), tput(cells[0].name, 8)), 0.8, false},
		{"warm-ctr-interp/bare-tput@1", "warm container + interpreter exec/s ÷ bare at 1", ratio(tput(interp, 1), tput(cells[0].name, 1)), math.NaN(), false},
		{"warm-ctr-interp/bare-tput@2", "warm container + interpreter exec/s ÷ bare at 2", ratio(tput(interp, 2), tput(cells[0].name, 2)), 1, false},
		{"warm-ctr-interp/bare-tput@4", "warm container + interpreter exec/s ÷ bare at 4", ratio(tput(interp, 4), tput(cells[0].name, 4)), 1, false},
		{"warm-ctr-interp/bare-tput@8", "warm container + interpreter exec/s ÷ bare at 8", ratio(tput(interp, 8), tput(cells[0].name, 8)), 1, false},
		{"warm-ctr-interp/bare-cpu@1", "warm container + interpreter CPU/exec ÷ bare at 1", ratio(cpu(interp, 1), cpu(cells[0].name, 1)), 1, true},
		{"warm-ctr-interp/bare-cpu@8", "warm container + interpreter CPU/exec ÷ bare at 8", ratio(cpu(interp, 8), cpu(cells[0].name, 8)), 1, true},
		{"cold-ctr/runc-p50", "cold container p50 ÷ runc run p50", ratio(p50("corral cold, container", 1), p50("runc run (hand-made bundle)", 1)), 1.1, true},
		{"runc-idle-MB", "MB per idle pooled sandbox, runc", mems[0].bytes / (1 << 20), 5, true},
		{"runsc-idle-MB", "MB per idle pooled sandbox, runsc", mems[2].bytes / (1 << 20), 30, true},
	}
	fmt.Fprintln(&out, "targets (docs/bench.md):")
	for _, t := range targets {
		verdict, v := "n/a", "-"
		target := fmt.Sprintf("(target ≤ %.2g)", t.limit)
		if !t.atMost {
			target = fmt.Sprintf("(target ≥ %.2g)", t.limit)
		}
		if math.IsNaN(t.limit) {
			target = "(no target)"
		}
		if !math.IsNaN(t.v) {
			verdict, v = "met", fmt.Sprintf("%.2f", t.v)
			switch {
			case math.IsNaN(t.limit):
				verdict = ""
			case (t.atMost && t.v > t.limit) || (!t.atMost && t.v < t.limit):
				verdict = "missed"
			}
			b.ReportMetric(t.v, t.metric)
		}
		fmt.Fprintf(&out, "  %-48s %8s  %-16s %s\n", t.what, v, target, verdict)
	}
	b.ReportMetric(float64(cells[0].series(1).median().Microseconds())/1000, "bare-p50-ms")
	os.Stderr.Write(out.Bytes())
}

func find(cells []*cell, name string) *cell {
	for _, c := range cells {
		if c.name == name {
			return c
		}
	}
	panic("no cell " + name)
}

// spawn runs a command and checks its output is exactly want.
func spawn(want string, cmd func(ctx context.Context) *exec.Cmd) func(context.Context) error {
	return spawnCPU(want, nil, cmd)
}

// spawnCPU is spawn that adds, if used is set, the CPU time of each
// command (its own and that of the descendants it waited for) to used.
func spawnCPU(want string, used *atomic.Int64, cmd func(ctx context.Context) *exec.Cmd) func(context.Context) error {
	return func(ctx context.Context) error {
		c := cmd(ctx)
		var out bytes.Buffer
		c.Stdout = &out
		if c.Stderr == nil { // a cell may send stderr elsewhere (corral run's verdict line)
			c.Stderr = &out
		}
		err := c.Run()
		if used != nil && c.ProcessState != nil {
			used.Add(int64(c.ProcessState.UserTime() + c.ProcessState.SystemTime()))
		}
		if err != nil {
			return fmt.Errorf("%s: %w: %.500s", c.Args[0], err, out.String())
		}
		if out.String() != want {
			return fmt.Errorf("%s: output %.500q, want %q", c.Args[0], out.String(), want)
		}
		return nil
	}
}

// bwrapArgs is a bubblewrap sandbox a careful person would write: every
// namespace new, the host's /usr read-only, fresh /proc, /dev and /tmp, no
// capabilities, unprivileged user, killed with its parent.
func bwrapArgs() []string {
	args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--uid", "1000", "--gid", "1000", "--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"bin", "lib", "lib64", "sbin"} {
		if target, err := os.Readlink("/" + d); err == nil {
			args = append(args, "--symlink", target, "/"+d)
		} else if fi, err := os.Stat("/" + d); err == nil && fi.IsDir() {
			args = append(args, "--ro-bind", "/"+d, "/"+d)
		}
	}
	return append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp",
		"--clearenv", "--setenv", "PATH", "/usr/bin:/bin")
}

// pyImage is the python image's root and the environment a program in it
// gets.
type pyImage struct {
	dir string
	env []string
}

// pythonRootfs builds the python image into the machine's test image
// directory (minutes the first time, a no-op after) and returns it.
func pythonRootfs(b *testing.B) pyImage {
	b.Helper()
	testenv.PythonImage(b)
	img, err := images.New(images.Config{Dir: testenv.ImageDir(), UID: 1000, GID: 1000}).Resolve("python")
	if err != nil {
		b.Fatal(err)
	}
	env := []string{"HOME=/tmp", "LANG=C.UTF-8"}
	if !strings.Contains(strings.Join(img.Env, "\n"), "PATH=") {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	return pyImage{dir: img.Rootfs, env: append(env, img.Env...)}
}

// idleMemory is the host memory one idle pooled sandbox of tier costs:
// the drop in MemAvailable from before a server starts to after its pool
// holds idleN sandboxes and the figure settles, less the server's own
// memory (baseRSS, a server without a pool), divided by idleN.
func idleMemory(b *testing.B, tier string, zygote bool, baseRSS int64) (float64, error) {
	ctx := b.Context()
	before, err := settledMemAvailable(ctx)
	if err != nil {
		return 0, err
	}
	s, err := startServer(b, "memory-"+tier, warmPool{image: images.HostName, tier: tier, minIdle: idleN, maxIdle: idleN, zygote: zygote})
	if err != nil {
		return 0, err
	}
	defer s.stop()
	if err := s.waitIdle(ctx, idleN, true, 3*time.Minute); err != nil {
		return 0, err
	}
	after, err := settledMemAvailable(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.stop(); err != nil {
		return 0, err
	}
	return float64(before-after-baseRSS) / idleN, nil
}

// settledMemAvailable waits until MemAvailable changes by less than 1 MiB
// over half a second (at most 15 s) and returns it.
func settledMemAvailable(ctx context.Context) (int64, error) {
	prev, err := memAvailable()
	if err != nil {
		return 0, err
	}
	for range 30 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		cur, err := memAvailable()
		if err != nil {
			return 0, err
		}
		if d := cur - prev; d < 1<<20 && d > -(1<<20) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}
