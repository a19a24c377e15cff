// Package hostile runs programs that try to escape or damage the host, each
// inside a Corral sandbox with limits set, and asserts both the verdict (or
// the refusal the program observed) and that the host is unaffected. Every
// program runs on both tiers.
package hostile

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) {
	// A canary in the host's environment: no sandbox may see it.
	os.Setenv("CORRAL_HOST_CANARY", canary)
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

const canary = "canary-7d1f0c"

var tiers = []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor}

func run(t *testing.T, e *engine.Engine, req sandbox.ExecuteRequest) sandbox.Result {
	t.Helper()
	job, err := e.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	return e.Run(t.Context(), job, nil)
}

// hostileCase is one hostile program and what must come of it.
type hostileCase struct {
	name string
	lang string
	// code may use @TOKEN@ (a name for processes the host then looks
	// for), @TCPPORT@ and @UDPPORT@ (the host's services), @HOSTIP@,
	// @ABSTRACT@ and @HOSTSOCK@ (the host's unix sockets) and
	// @FLOOD_MIB@. Python code follows the prelude.
	code   string
	limits sandbox.Limits
	// heavy cases (CPU, memory, disk or output hungry) run alone.
	heavy bool
	// watch samples the host's process and thread counts during the run
	// and bounds their rise by the sandbox's pids limit.
	watch bool
	// verdict is the expected error type; empty means success. alsoOn
	// accepts another on one tier, where the tiers legitimately differ.
	verdict sandbox.ErrorType
	alsoOn  map[sandbox.Isolation]sandbox.ErrorType
	// check asserts what the program observed.
	check func(t *testing.T, o *outcome)
	// weakness, if set, names a known weakness this case exposes (on the
	// weakOn tiers, or both if empty); the case fails there until it is
	// fixed, and its failures say so.
	weakness string
	weakOn   []sandbox.Isolation
}

// weakHere returns the case's known weakness on tier, if any.
func (c hostileCase) weakHere(tier sandbox.Isolation) string {
	if len(c.weakOn) == 0 || slices.Contains(c.weakOn, tier) {
		return c.weakness
	}
	return ""
}

// outcome is what a case produced.
type outcome struct {
	tier sandbox.Isolation
	res  sandbox.Result
	kv   map[string]string // key=value lines of stdout
	wall time.Duration
	// root: the case ran as root inside a live sandbox, whose system is
	// its own to write (docs/sandboxes.md).
	root bool
}

// TestHostile runs every case on both tiers, two sandboxes at a time (a
// heavy case alone), and checks the host after each.
func TestHostile(t *testing.T) {
	e := testenv.Engine(t)
	h := watchHost(t, os.TempDir())
	g := newGate(2)
	var mu sync.Mutex
	var summary []string
	start := time.Now()
	t.Run("case", func(t *testing.T) {
		for _, c := range cases {
			for _, tier := range tiers {
				t.Run(c.name+"/"+string(tier), func(t *testing.T) {
					t.Parallel()
					leave := g.enter(c.heavy)
					defer leave()
					line := runCase(t, e, h, c, tier)
					mu.Lock()
					summary = append(summary, line)
					mu.Unlock()
				})
			}
		}
	})
	sort.Strings(summary)
	t.Logf("%d runs in %v:\n%s", len(summary), time.Since(start).Round(time.Second), strings.Join(summary, "\n"))
	h.check(t)
	// Every sandbox is gone; the host's process count is back where it
	// was, give or take what else runs on the machine.
	if n := hostProcesses(); n > h.procsStart+32 {
		t.Errorf("the host has %d processes, %d before the suite", n, h.procsStart)
	}
}

// runCase runs one case on one tier and returns a summary line.
func runCase(t *testing.T, e *engine.Engine, h *host, c hostileCase, tier sandbox.Isolation) string {
	token := newToken()
	code := h.program(c, token, tier)
	weakness := c.weakHere(tier)

	job, err := e.Prepare(sandbox.ExecuteRequest{Language: c.lang, Code: code, Limits: c.limits, Isolation: tier})
	if err != nil {
		t.Fatal(err)
	}
	var w *watcher
	if c.watch {
		w = startWatch()
	}
	sink := &observer{}
	began := time.Now()
	res := e.Run(t.Context(), job, sink)
	wall := time.Since(began)
	if w != nil {
		w.stop(t, e.Config().Pids)
	}
	o := &outcome{tier: tier, res: res, kv: parseKV(res.Stdout), wall: wall}

	if weakness != "" {
		markWeakness(t, weakness)
	}
	checkVerdict(t, c, o)
	if c.check != nil && !t.Failed() {
		c.check(t, o)
	}
	for _, s := range []string{res.Stdout, res.Stderr} {
		if strings.Contains(s, canary) {
			t.Errorf("HOST LEAKED: the program's output holds the host's environment canary")
		}
	}
	checkGone(t, sink.id(), token)
	h.check(t)

	verdict := "success"
	if res.Error != nil {
		verdict = string(res.Error.Type)
	}
	mark := "ok"
	if t.Failed() {
		mark = "FAIL"
		if weakness != "" {
			mark = "FAIL (known weakness)"
		}
	}
	line := fmt.Sprintf("%-24s %-9s %-15s %6d ms  %s", c.name, tier, verdict, wall.Milliseconds(), mark)
	t.Log(line)
	return line
}

// program returns c's code as it runs on tier: python's after the
// prelude, the placeholders filled in.
func (h *host) program(c hostileCase, token string, tier sandbox.Isolation) string {
	code := c.code
	if c.lang == "python" {
		code = prelude + code
	}
	hostIP := h.ip
	if hostIP == "" {
		hostIP = "192.0.2.1"
	}
	return strings.NewReplacer(
		"@TOKEN@", token, "@TCPPORT@", strconv.Itoa(h.tcpPort), "@UDPPORT@", strconv.Itoa(h.udpPort),
		"@HOSTIP@", hostIP, "@ABSTRACT@", h.abstract, "@HOSTSOCK@", h.sock,
		"@FLOOD_MIB@", strconv.Itoa(floodMiB[tier]),
	).Replace(code)
}

func checkVerdict(t *testing.T, c hostileCase, o *outcome) {
	t.Helper()
	r := o.res
	if r.Tier != string(o.tier) {
		t.Errorf("ran on %s, asked for %s", r.Tier, o.tier)
	}
	want := []sandbox.ErrorType{c.verdict}
	if v, ok := c.alsoOn[o.tier]; ok {
		want = append(want, v)
	}
	var got sandbox.ErrorType
	if r.Error != nil {
		got = r.Error.Type
	}
	if (got == "") != (r.Status == sandbox.StatusSuccess) || !slices.Contains(want, got) {
		t.Errorf("verdict %s %+v, want %q\nstdout %s\nstderr %s", r.Status, r.Error, want, clip(r.Stdout), clip(r.Stderr))
	}
	if c.verdict == sandbox.ErrOOM && r.PeakMemoryMB > c.limits.MemoryMB+8 {
		t.Errorf("peak memory %d MB above the %d MB limit", r.PeakMemoryMB, c.limits.MemoryMB)
	}
	if got == sandbox.ErrTimeout && c.limits.TimeoutMS > 0 {
		if limit := time.Duration(c.limits.TimeoutMS) * time.Millisecond; o.wall < limit || o.wall > limit+10*time.Second {
			t.Errorf("a %v timeout took %v", limit, o.wall)
		}
	}
}

// markWeakness labels t's failures, so that nobody mistakes a known
// weakness for a regression (or the reverse).
func markWeakness(t *testing.T, what string) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("KNOWN WEAKNESS (not a regression): %s", what)
		} else {
			t.Logf("the known weakness seems fixed; drop the mark: %s", what)
		}
	})
}

// parseKV reads key=value lines.
func parseKV(s string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k != "" && !strings.ContainsAny(k, " \t") {
			if _, dup := kv[k]; !dup {
				kv[k] = v
			}
		}
	}
	return kv
}

// in asserts each key's value is one of allowed.
func (o *outcome) in(t *testing.T, allowed []string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		v, ok := o.kv[k]
		if !ok {
			t.Errorf("%s: not reported (stdout %s, stderr %s)", k, clip(o.res.Stdout), clip(o.res.Stderr))
			continue
		}
		found := false
		for _, a := range allowed {
			found = found || v == a
		}
		if !found {
			t.Errorf("%s = %s, want one of %v", k, clip(v), allowed)
		}
	}
}

// want asserts one key's value.
func (o *outcome) want(t *testing.T, key, value string) {
	t.Helper()
	if v, ok := o.kv[key]; !ok || v != value {
		t.Errorf("%s = %q, want %q (stdout %s, stderr %s)", key, v, value, clip(o.res.Stdout), clip(o.res.Stderr))
	}
}

// notOK asserts each key was reported and did not succeed.
func (o *outcome) notOK(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := o.kv[k]; !ok || v == "ok" || strings.HasPrefix(v, "ok:") {
			t.Errorf("%s = %q, want a refusal", k, clip(v))
		}
	}
}

// nonZero asserts each key (an exit status) was reported and is not 0.
func (o *outcome) nonZero(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := o.kv[k]; !ok || v == "0" {
			t.Errorf("%s exited %q, want a failure (stderr %s)", k, v, clip(o.res.Stderr))
		}
	}
}

// observer learns the sandbox's id from the engine.
type observer struct {
	mu  sync.Mutex
	sid string
}

func (o *observer) Stdout([]byte) {}
func (o *observer) Stderr([]byte) {}
func (o *observer) Sandbox(id string) {
	o.mu.Lock()
	o.sid = id
	o.mu.Unlock()
}

func (o *observer) id() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sid
}

var _ engine.SandboxObserver = (*observer)(nil)

// gate lets n light cases run at once, or one heavy case alone.
type gate struct {
	heavy  sync.Mutex // serialises heavy cases collecting every token
	tokens chan struct{}
}

func newGate(n int) *gate { return &gate{tokens: make(chan struct{}, n)} }

func (g *gate) enter(heavy bool) (leave func()) {
	n := 1
	if heavy {
		n = cap(g.tokens)
		g.heavy.Lock()
		defer g.heavy.Unlock()
	}
	for range n {
		g.tokens <- struct{}{}
	}
	return func() {
		for range n {
			<-g.tokens
		}
	}
}

// watcher samples the host's process and thread counts.
type watcher struct {
	before, beforeTasks int
	mu                  sync.Mutex
	peak, peakTasks     int
	done                chan struct{}
	wg                  sync.WaitGroup
}

func startWatch() *watcher {
	w := &watcher{before: hostProcesses(), beforeTasks: hostTasks(), done: make(chan struct{})}
	w.peak, w.peakTasks = w.before, w.beforeTasks
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.done:
				return
			case <-time.After(25 * time.Millisecond):
			}
			p, tk := hostProcesses(), hostTasks()
			w.mu.Lock()
			w.peak, w.peakTasks = max(w.peak, p), max(w.peakTasks, tk)
			w.mu.Unlock()
		}
	}()
	return w
}

// stop ends sampling and checks the rise: runc's tasks are the host's own,
// up to the pids limit; gVisor shows the host its sentry's threads and a
// few stub threads a task, within its host pids limit (bundle.GVisor).
// Afterwards the counts come back down.
func (w *watcher) stop(t *testing.T, pids int64) {
	t.Helper()
	w.end(t, pids)
	deadline := time.Now().Add(3 * time.Second)
	for hostProcesses() > w.before+32 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if after := hostProcesses(); after > w.before+32 {
		t.Errorf("LEFT ON HOST: %d host processes after the run, %d before", after, w.before)
	}
}

// end ends sampling and checks the rise alone.
func (w *watcher) end(t *testing.T, pids int64) {
	t.Helper()
	close(w.done)
	w.wg.Wait()
	procBound, taskBound := 2*int(pids)+64, 5*int(pids)+256
	if rise := w.peak - w.before; rise > procBound {
		t.Errorf("HOST FLOODED: host processes rose by %d; the bound is %d", rise, procBound)
	}
	if rise := w.peakTasks - w.beforeTasks; rise > taskBound {
		t.Errorf("HOST FLOODED: host threads rose by %d; the bound is %d", rise, taskBound)
	}
	t.Logf("host processes %d → peak %d; threads %d → peak %d", w.before, w.peak, w.beforeTasks, w.peakTasks)
}

func clip(s string) string {
	if len(s) > 600 {
		return fmt.Sprintf("%q … %q", s[:300], s[len(s)-300:])
	}
	return fmt.Sprintf("%q", s)
}
