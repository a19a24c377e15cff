package hostile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// The limits of the live sandboxes the hostile programs run in: for the
// whole sandbox, every process of it together.
const (
	liveMemoryMB = 512
	livePids     = 192
	liveDiskMB   = 256
	// liveCaseTimeout bounds a case's process when the case sets no
	// timeout of its own: a live process has none.
	liveCaseTimeout = 30 * time.Second
	// bombFor is how long the fork bomb holds the sandbox full, once a
	// fork of it was refused; bombFill bounds the wait for that (see
	// forkBomb).
	bombFor  = 3 * time.Second
	bombFill = 2 * time.Minute
)

// liveSkip says why a case does not run as a process of a live sandbox
// on tier, or "" if it does.
func liveSkip(c hostileCase, tier sandbox.Isolation) string {
	switch {
	case c.heavy:
		return "heavy: TestHostileLive runs a fork bomb and a memory balloon of its own"
	case c.verdict != "":
		return "expects the verdict " + string(c.verdict) + ", which a process of a live sandbox has not"
	case c.lang == "c":
		return "C: the live sandbox's python image has no compiler"
	case c.alsoOn[tier] != "":
		// signal-agent-threads on gVisor: the program ends its own
		// sandbox, whose one-shot record says so; TestHostileLive's
		// memory balloon covers a live sandbox made again.
		return "on " + string(tier) + " it may end its sandbox (its one-shot verdict " + string(c.alsoOn[tier]) + ")"
	}
	return ""
}

// TestHostileLive runs the hostile programs against live sandboxes of a
// real corral serve, through the Go SDK: on each tier, one sandbox with
// limits set runs every light case whose one-shot verdict is success as a
// process of its own, one after the other, and applies the case's check
// to what it printed; a process in it cannot see, read or signal those of
// a second sandbox (of another tenant); then a fork bomb and a memory
// balloon run in it, the limits hold, and the sandbox answers the next
// process (or says it was made again). The host is checked throughout.
func TestHostileLive(t *testing.T) {
	// Mounts the server keeps for all its sandboxes (runsc's null network
	// namespace) go when it stops: checked then, after its own cleanup.
	var s *testserver.Server
	t.Cleanup(func() {
		if s == nil {
			return
		}
		for _, m := range testenv.Mounts(s.Data) {
			t.Errorf("LEFT ON HOST after the server stopped: mount %s", m)
		}
	})
	s = testserver.Start(t, testserver.Options{NoPool: true})
	h := watchHost(t, os.TempDir())
	alpha := sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute})
	beta := sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: testserver.BetaKey, Timeout: 2 * time.Minute})
	g := newGate(2)
	var mu sync.Mutex
	var summary, skipped, tokens []string
	start := time.Now()
	t.Run("tier", func(t *testing.T) {
		for _, tier := range tiers {
			t.Run(string(tier), func(t *testing.T) {
				t.Parallel()
				l := &liveTier{h: h, g: g, tier: tier, alpha: alpha, beta: beta}
				l.run(t)
				mu.Lock()
				summary = append(summary, l.summary...)
				skipped = append(skipped, l.skipped...)
				tokens = append(tokens, l.tokens...)
				mu.Unlock()
			})
		}
	})
	sort.Strings(summary)
	sort.Strings(skipped)
	t.Logf("%d runs in %v:\n%s\nskipped:\n%s", len(summary), time.Since(start).Round(time.Second),
		strings.Join(summary, "\n"), strings.Join(skipped, "\n"))
	// Every sandbox is killed: nothing of them is left on the host.
	if dirs, _ := oci.SandboxDirs(s.Data); len(dirs) != 0 {
		t.Errorf("LEFT ON HOST: sandbox directories %v", dirs)
	}
	if n := hostProcesses(); n > h.procsStart+32 {
		t.Errorf("the host has %d processes, %d before the test", n, h.procsStart)
	}
	for _, p := range hostProcessList() {
		for _, tok := range tokens {
			if strings.Contains(p.cmdline, tok) || strings.Contains(p.comm, commToken(tok)) {
				t.Errorf("LEFT ON HOST: process %d %q (%s) carrying a program's token", p.pid, p.cmdline, p.comm)
			}
		}
	}
	h.check(t)
}

// liveTier is one tier's part of TestHostileLive.
type liveTier struct {
	h     *host
	g     *gate
	tier  sandbox.Isolation
	alpha *sandbox.Client
	beta  *sandbox.Client

	sb      *sandbox.Sandbox // the sandbox with limits, alpha's
	summary []string
	skipped []string
	tokens  []string
}

func (l *liveTier) run(t *testing.T) {
	ctx := t.Context()
	sb, info, err := l.alpha.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: l.tier, TimeoutSeconds: 600,
		Limits:   sandbox.SandboxLimits{MemoryMB: liveMemoryMB, Pids: livePids, DiskMB: liveDiskMB, CPUs: 1},
		Metadata: map[string]string{"test": "hostile-live"}})
	if err != nil {
		t.Fatal(err)
	}
	l.sb = sb
	defer l.kill(t, sb)
	if info.Tier != string(l.tier) || info.Limits.Pids != livePids || info.Limits.MemoryMB != liveMemoryMB {
		t.Fatalf("created %+v", info)
	}
	t.Run("case", func(t *testing.T) {
		for _, c := range cases {
			if why := liveSkip(c, l.tier); why != "" {
				l.skipped = append(l.skipped, fmt.Sprintf("%-24s %-9s %s", c.name, l.tier, why))
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				leave := l.g.enter(false)
				defer leave()
				l.summary = append(l.summary, l.runCase(t, c, ""))
			})
		}
	})
	// The same cases as root inside the sandbox: root owns the sandbox's
	// system, and nothing beyond it.
	t.Run("case-as-root", func(t *testing.T) {
		for _, c := range cases {
			if liveSkip(c, l.tier) != "" {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				leave := l.g.enter(false)
				defer leave()
				l.summary = append(l.summary, l.runCase(t, c, "root"))
			})
		}
	})
	t.Run("apart", l.apart)
	t.Run("fork-bomb", func(t *testing.T) {
		leave := l.g.enter(true)
		defer leave()
		l.forkBomb(t)
	})
	t.Run("memory-balloon", func(t *testing.T) {
		leave := l.g.enter(true)
		defer leave()
		l.memoryBalloon(t)
	})
}

func (l *liveTier) kill(t *testing.T, sb *sandbox.Sandbox) {
	if err := sb.Kill(context.Background()); err != nil {
		t.Errorf("kill %s: %v", sb.ID, err)
	}
}

// liveRun is what a process of a live sandbox did.
type liveRun struct {
	pid            int
	stdout, stderr string
	exit           *sandbox.ProcessExit
	wall           time.Duration
	timedOut       bool
}

// liveExec runs argv as a process of sb until it ends or timeout passes,
// when it is killed (its process group: what it started too).
func liveExec(t *testing.T, sb *sandbox.Sandbox, argv []string, user string, timeout time.Duration) liveRun {
	t.Helper()
	began := time.Now()
	p, err := sb.Start(t.Context(), sandbox.StartProcessRequest{Cmd: argv, User: user})
	if err != nil {
		t.Fatalf("start %s: %v", argv[0], err)
	}
	r := liveRun{pid: p.PID}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for ev, err := range p.Events(ctx, 0) {
		if err != nil {
			r.timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			if !r.timedOut {
				t.Fatalf("events of %s: %v", argv[0], err)
			}
			break
		}
		switch ev.Type {
		case sandbox.ProcessEventStdout:
			out.Write(ev.Data)
		case sandbox.ProcessEventStderr:
			errOut.Write(ev.Data)
		case sandbox.ProcessEventEnd:
			r.exit = ev.Exit
		}
	}
	if r.timedOut {
		if err := p.Signal(t.Context(), "SIGKILL"); err != nil && !errors.Is(err, sandbox.ErrProcessEnded) {
			t.Errorf("kill %s after %v: %v", argv[0], timeout, err)
		}
		wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if r.exit, err = p.Wait(wctx); err != nil {
			t.Fatalf("%s still running 10 s after SIGKILL: %v", argv[0], err)
		}
	}
	r.wall = time.Since(began)
	r.stdout, r.stderr = out.String(), errOut.String()
	if r.exit == nil {
		t.Fatalf("%s: no end event", argv[0])
	}
	return r
}

// argv runs code in the case's language.
func argv(lang, code string) []string {
	if lang == "python" {
		return []string{"python3", "-c", code}
	}
	return []string{"bash", "-c", code}
}

// runCase runs one case as a process of the live sandbox, as user (""
// the sandbox's user), and returns a summary line. A case succeeds as a
// process when it exits 0 of itself; its check then reads its key=value
// lines as it reads a one-shot run's.
func (l *liveTier) runCase(t *testing.T, c hostileCase, user string) string {
	token := newToken()
	l.tokens = append(l.tokens, token)
	timeout := liveCaseTimeout
	if c.limits.TimeoutMS > 0 {
		timeout = time.Duration(c.limits.TimeoutMS) * time.Millisecond
	}
	weakness := c.weakHere(l.tier)
	r := liveExec(t, l.sb, argv(c.lang, l.h.program(c, token, l.tier)), user, timeout)
	code := r.exit.ExitCode
	res := sandbox.Result{Status: sandbox.StatusSuccess, Tier: string(l.tier), Stdout: r.stdout, Stderr: r.stderr, ExitCode: &code}
	if weakness != "" {
		markWeakness(t, weakness)
	}
	switch {
	case r.timedOut:
		t.Errorf("still running after %v: killed\nstdout %s\nstderr %s", timeout, clip(r.stdout), clip(r.stderr))
	case r.exit.Error != "" || r.exit.ExitCode != 0:
		t.Errorf("ended %+v, want exit 0\nstdout %s\nstderr %s", r.exit, clip(r.stdout), clip(r.stderr))
	}
	if c.check != nil && !t.Failed() {
		c.check(t, &outcome{tier: l.tier, res: res, kv: parseKV(r.stdout), wall: r.wall, root: user == "root"})
	}
	for _, out := range []string{r.stdout, r.stderr} {
		if strings.Contains(out, canary) {
			t.Errorf("HOST LEAKED: the program's output holds the host's environment canary")
		}
	}
	l.h.check(t)
	mark := "ok"
	if t.Failed() {
		mark = "FAIL"
		if weakness != "" {
			mark = "FAIL (known weakness)"
		}
	}
	name := c.name
	if user != "" {
		name += " as " + user
	}
	line := fmt.Sprintf("%-32s %-9s exit %-4d %6d ms  %s", name, l.tier, r.exit.ExitCode, r.wall.Milliseconds(), mark)
	t.Log(line)
	return line
}

// apartProbe looks for a token in every process's command line and for
// files named after it, then signals a host pid: what another sandbox
// holds.
const apartProbe = `seen = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        try:
            if TOKEN.encode() in open('/proc/%s/cmdline' % p, 'rb').read():
                seen.append(p)
        except OSError:
            pass
report('seen', ','.join(seen) or 'none')
attempt('tmp', lambda: read_probe('/tmp/' + TOKEN))
attempt('workspace', lambda: read_probe('/workspace/' + TOKEN))
attempt('kill_host_pid', lambda: os.kill(HOSTPID, 9))
`

// apart: a second sandbox, of another tenant, runs a process and holds
// files named by a token; a process of the first sees neither, cannot
// signal the second's process by its host pid, and the kill-everything
// case run in the first leaves it running. The first's tenant cannot
// reach the second through the API either.
func (l *liveTier) apart(t *testing.T) {
	ctx := t.Context()
	other, _, err := l.beta.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: l.tier, TimeoutSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer l.kill(t, other)
	token := newToken()
	l.tokens = append(l.tokens, token)
	sleeper, err := other.Start(ctx, sandbox.StartProcessRequest{Shell: "exec -a " + token + " sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/tmp/" + token, token} {
		if _, err := other.Files().Write(ctx, p, strings.NewReader("the other sandbox's")); err != nil {
			t.Fatal(err)
		}
	}
	// Its host pid, where the host sees it (runc); 1 << 22 (above the
	// kernel's pid_max) otherwise.
	hostPID := 1 << 22
	testenv.Eventually(t, 10*time.Second, func() bool {
		for _, p := range hostProcessList() {
			if strings.HasPrefix(p.cmdline, token+" ") {
				hostPID = p.pid
				return true
			}
		}
		return l.tier != sandbox.IsolationContainer
	})
	if l.tier == sandbox.IsolationContainer && hostPID == 1<<22 {
		t.Fatalf("the other sandbox's process %s is not on the host", token)
	}
	code := strings.ReplaceAll(prelude, "@TOKEN@", token) + "HOSTPID = " + strconv.Itoa(hostPID) + "\n" + apartProbe
	for _, user := range []string{"", "root"} {
		r := liveExec(t, l.sb, argv("python", code), user, liveCaseTimeout)
		o := &outcome{tier: l.tier, res: sandbox.Result{Stdout: r.stdout, Stderr: r.stderr}, kv: parseKV(r.stdout)}
		o.want(t, "seen", "none")
		o.in(t, []string{"ENOENT"}, "tmp", "workspace")
		o.in(t, []string{"ESRCH"}, "kill_host_pid")
		for _, c := range cases {
			if c.name == "kill-everything" {
				l.runCase(t, c, user)
			}
		}
	}
	if p, err := sleeper.Info(ctx); err != nil || !p.Running {
		t.Errorf("the other sandbox's process after the first's probes: %+v, %v; want it running", p, err)
	}
	var b bytes.Buffer
	if err := other.Files().Read(ctx, "/tmp/"+token, &b); err != nil || b.String() != "the other sandbox's" {
		t.Errorf("the other sandbox's file: %q, %v", b.String(), err)
	}
	if _, err := l.alpha.Sandbox(other.ID).Info(ctx); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another tenant's sandbox through the API: %v, want not found", err)
	}
	if _, err := l.alpha.Sandbox(other.ID).Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a process in another tenant's sandbox: %v, want not found", err)
	}
}

// forkBomb runs the classic bash fork bomb as a process of the sandbox
// until a fork of it is refused at the pids limit (bash says so on
// stderr), holds it there for bombFor, its shell then sleeping (exec: no
// fork needed), and kills it by its process group, which the bomb's
// shells all stay in. The host's process and thread counts rise within
// the bound the limit sets; on runc the sandbox's cgroup holds the limit
// and counts the refusals. Then the sandbox runs a next process, with
// nothing of the bomb left in it.
//
// The bomb is given until the refusal, not a fixed time: on runc it fills
// the sandbox in milliseconds, but on gVisor each fork costs the sentry
// tens of milliseconds (a new address space and its host stub process)
// under the sandbox's 1-CPU quota, and on a loaded 2-core machine the
// bash bomb was measured below 10 forks a second: 3 s left it far short
// of its 85 tasks (liveMemoryMB/6, the gVisor task limit), so no fork was
// ever refused. bombFill bounds the wait.
func (l *liveTier) forkBomb(t *testing.T) {
	ctx := t.Context()
	before, err := l.sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	token := newToken()
	l.tokens = append(l.tokens, token)
	w := startWatch()
	began := time.Now()
	p, err := l.sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"bash", "-c", ":(){ :|:& };: ; exec -a " + token + " sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	// The bomb's stderr, followed to its end; refused is closed at its
	// first refused fork.
	var (
		mu     sync.Mutex
		stderr []byte
	)
	refused, followed := make(chan struct{}), make(chan error, 1)
	go func() {
		met := false
		for ev, err := range p.Events(ctx, 0) {
			if err != nil {
				followed <- err
				return
			}
			if ev.Type == sandbox.ProcessEventStderr {
				mu.Lock()
				stderr = append(stderr, ev.Data...)
				if !met && (bytes.Contains(stderr, []byte("fork: retry: Resource temporarily unavailable")) ||
					bytes.Contains(stderr, []byte("fork: Resource temporarily unavailable"))) {
					met = true
					close(refused)
				}
				mu.Unlock()
			}
		}
		followed <- nil
	}()
	// The bomb's root process on the host, for its cgroup (runc only:
	// gVisor's processes are the sentry's).
	var cgroup string
	if l.tier == sandbox.IsolationContainer {
		testenv.Eventually(t, 10*time.Second, func() bool {
			for _, hp := range hostProcessList() {
				if strings.HasPrefix(hp.cmdline, token+" ") {
					cgroup = pidsCgroup(hp.pid)
				}
			}
			return cgroup != ""
		})
	}
	select {
	case <-refused:
		t.Logf("the bomb met its first refused fork after %v", time.Since(began).Round(time.Millisecond))
		time.Sleep(bombFor) // the bomb at the limit: what it does meanwhile is the test
	case <-time.After(bombFill):
		mu.Lock()
		t.Errorf("the bomb met no refused fork in %v: it never reached the pids limit (stderr %s)", bombFill, clip(string(stderr)))
		mu.Unlock()
	}
	if err := p.Signal(ctx, "SIGKILL"); err != nil {
		t.Fatalf("kill the bomb: %v", err)
	}
	end, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.tier == sandbox.IsolationGVisor {
		// The sentry keeps the host stub processes of the bomb's address
		// spaces for reuse while the sandbox lives: the host's process
		// count comes down when it ends (TestHostileLive checks then).
		w.end(t, livePids)
	} else {
		w.stop(t, livePids)
	}
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	if l.tier == sandbox.IsolationContainer {
		if cgroup == "" {
			t.Error("the bomb's cgroup not found on the host")
		} else {
			if max := readTrim(filepath.Join(cgroup, "pids.max")); max != strconv.Itoa(livePids) {
				t.Errorf("the sandbox's pids.max is %s, want %d", max, livePids)
			}
			events := readTrim(filepath.Join(cgroup, "pids.events"))
			t.Logf("the sandbox's pids.events: %s", events)
			if n := maxEvents(events); n < 1 {
				t.Errorf("the sandbox's cgroup counts no refused fork: %q", events)
			}
		}
	}
	l.answers(t, before, end)
}

// memoryBalloon allocates 16 MiB after 16 MiB, saying so each time, up to
// 1 GiB: the memory limit ends it (or the sandbox) below the limit.
func (l *liveTier) memoryBalloon(t *testing.T) {
	before, err := l.sb.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r := liveExec(t, l.sb, argv("python", `import sys
chunks = []
for i in range(1, 65):
    chunks.append(b'x' * (16 << 20))
    print('mib=%d' % (i * 16), flush=True)
print('done=yes', flush=True)
`), "", 60*time.Second)
	reached := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		if v, ok := strings.CutPrefix(line, "mib="); ok {
			reached, _ = strconv.Atoi(v)
		}
	}
	t.Logf("the balloon reached %d MiB, the limit %d MiB: %+v in %v", reached, liveMemoryMB, r.exit, r.wall.Round(time.Millisecond))
	if strings.Contains(r.stdout, "done=yes") || reached > liveMemoryMB {
		t.Errorf("the balloon reached %d MiB past the %d MiB limit", reached, liveMemoryMB)
	}
	if r.timedOut || (r.exit.Error == "" && r.exit.Signal != "SIGKILL") {
		t.Errorf("the balloon ended %+v, want killed (SIGKILL) or its sandbox ended", r.exit)
	}
	l.answers(t, before, r.exit)
	l.h.check(t)
}

// answers asserts the sandbox runs a next process after one that ended
// as end did: the same sandbox, or one made again (sandbox_ended) whose
// info counts the restart. Nothing of the bomb or balloon is left.
func (l *liveTier) answers(t *testing.T, before *sandbox.Info, end *sandbox.ProcessExit) {
	t.Helper()
	r := liveExec(t, l.sb, []string{"bash", "-c", "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n; echo nproc=$(ulimit -u)"}, "", liveCaseTimeout)
	if r.exit.ExitCode != 0 || r.exit.Error != "" {
		t.Fatalf("the next process: %+v, stderr %s", r.exit, clip(r.stderr))
	}
	procs, _ := strconv.Atoi(parseKV(r.stdout)["procs"])
	after, err := l.sb.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	restarted := after.Restarts - before.Restarts
	t.Logf("after %+v: the next process answered in %v; %d processes in the sandbox; restarts %d → %d; ulimit -u %s",
		end, r.wall.Round(time.Millisecond), procs, before.Restarts, after.Restarts, parseKV(r.stdout)["nproc"])
	if end.Error == "sandbox_ended" && restarted < 1 {
		t.Errorf("the sandbox ended and runs again, but its info counts no restart: %+v", after)
	}
	if end.Error == "" && restarted != 0 {
		t.Errorf("the sandbox was made again (restarts %d → %d) though the process ended by itself: %+v", before.Restarts, after.Restarts, end)
	}
	// gVisor holds the pids limit inside, as the process limit of the
	// sandbox's user (RLIMIT_NPROC), which may be lower (memory bounds it).
	if n, err := strconv.Atoi(parseKV(r.stdout)["nproc"]); l.tier == sandbox.IsolationGVisor && (err != nil || n > livePids) {
		t.Errorf("ulimit -u in the gVisor sandbox is %q, above its pids limit %d", parseKV(r.stdout)["nproc"], livePids)
	}
	// The agent, the probe (and bash's subshell), what earlier cases left
	// sleeping: far from the pids limit.
	if procs < 1 || procs > 16 {
		t.Errorf("%d processes in the sandbox after the run: %s", procs, clip(r.stdout))
	}
}

// pidsCgroup returns the directory of a host process's pids cgroup (v1's
// pids hierarchy, or v2's), or "".
func pidsCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	v2 := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "pids" {
			return filepath.Join("/sys/fs/cgroup/pids", f[2])
		}
		if f[0] == "0" && f[1] == "" {
			v2 = filepath.Join("/sys/fs/cgroup", f[2])
		}
	}
	return v2
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

// maxEvents reads the count of refused forks of a pids.events file.
func maxEvents(events string) int {
	for _, line := range strings.Split(events, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "max" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}
