package pool_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/pool"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

var tiers = []runtime.Tier{runtime.TierContainer, runtime.TierGVisor}

// fixture is an engine whose executions go through a pool of one class:
// python on the host image, with a zygote.
type fixture struct {
	t    *testing.T
	e    *engine.Engine
	p    *pool.Pool
	m    *metrics.Metrics
	tier runtime.Tier
}

func newFixture(t *testing.T, tier runtime.Tier, zygote bool, maxUses int, engineConfig ...func(*engine.Config)) *fixture {
	return newFixtureOf(t, pool.Warm{Image: images.HostName, Tier: tier, Language: "python", MinIdle: 1, MaxIdle: 3, Zygote: zygote}, maxUses, engineConfig...)
}

// newFixtureOf is newFixture with the class w.
func newFixtureOf(t *testing.T, w pool.Warm, maxUses int, engineConfig ...func(*engine.Config)) *fixture {
	tier := w.Tier
	e := testenv.Engine(t, engineConfig...)
	cfg := pool.DefaultConfig()
	cfg.MaxUses = maxUses
	cfg.Warm = []pool.Warm{w}
	m := metrics.New()
	p, skipped := pool.New(context.Background(), e.Fleet(), e, cfg, m, slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if len(skipped) > 0 {
		t.Fatal(skipped)
	}
	t.Cleanup(p.Close) // before the engine's Close (cleanups run last-in first)
	f := &fixture{t: t, e: e, p: p, m: m, tier: tier}
	f.waitIdle(1)
	return f
}

// waitIdle waits until the pool holds at least n ready sandboxes.
func (f *fixture) waitIdle(n int) {
	f.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); f.p.Idle()[0] < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			f.t.Fatalf("pool holds %d ready sandboxes, want %d", f.p.Idle()[0], n)
		}
	}
}

// waitReset waits until none of the pool's used sandboxes is still being
// reset: each has been destroyed or is ready again.
func (f *fixture) waitReset() {
	f.t.Helper()
	g := f.m.PoolReset.WithLabelValues(string(f.tier), images.HostName)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var m dto.Metric
		if err := g.Write(&m); err != nil {
			f.t.Fatal(err)
		}
		if m.GetGauge().GetValue() == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%v sandboxes still being reset after a minute", m.GetGauge().GetValue())
		}
	}
}

// count reads a counter of f's class whose last label is label.
func (f *fixture) count(c *prometheus.CounterVec, label string) float64 {
	f.t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(string(f.tier), images.HostName, label).Write(&m); err != nil {
		f.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// waits counts the claims of f's tier that waited for a reset.
func (f *fixture) waits() uint64 {
	f.t.Helper()
	var m dto.Metric
	if err := f.m.PoolWait.WithLabelValues(string(f.tier)).(prometheus.Metric).Write(&m); err != nil {
		f.t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func (f *fixture) run(tenant, code string, mutate ...func(*sandbox.ExecuteRequest)) sandbox.Result {
	f.t.Helper()
	return f.runJob(tenant, code, nil, mutate...)
}

// runJob is run with a last change to the prepared job (nil: none).
func (f *fixture) runJob(tenant, code string, change func(*engine.Job), mutate ...func(*sandbox.ExecuteRequest)) sandbox.Result {
	f.t.Helper()
	req := sandbox.ExecuteRequest{Language: "python", Code: code, Isolation: sandbox.Isolation(f.tier)}
	for _, m := range mutate {
		m(&req)
	}
	job, err := f.e.Prepare(req)
	if err != nil {
		f.t.Fatal(err)
	}
	job.Tenant = tenant
	if change != nil {
		change(job)
	}
	if job.Lease == nil {
		if err := f.e.Acquire(context.Background(), job, f.p); err != nil {
			return f.e.Failed(context.Background(), job, err)
		}
	}
	return f.e.Run(context.Background(), job, nil)
}

// marker says which sandbox an execution ran in: its agent's start time
// (unique on runc) and the kernel's boot id (unique per gVisor sandbox).
const marker = `
def _sandbox():
    with open('/proc/1/stat') as f:
        start = f.read().rsplit(')', 1)[1].split()[19]
    with open('/proc/sys/kernel/random/boot_id') as f:
        return start + '/' + f.read().strip()
`

// pollute changes everything an execution could leave to the next one.
const pollute = marker + `
import os, sys, signal, json, random, subprocess, string, decimal
GLOBAL_LEAK = 1
string.corral_leak = 1            # a module's state
import email.mime.text            # a module nobody imports
os.environ['CORRAL_LEAK'] = '1'   # the environment
os.chdir('/tmp')                  # the working directory
os.umask(0o077)
open('/tmp/leak', 'w').write('x')
open('/workspace/leak', 'w').write('x')
os.makedirs('/workspace/output/deep', exist_ok=True)
open('/dev/shm/leak', 'w').write('x')
fd = os.open('/workspace/leak', os.O_RDONLY)
os.set_inheritable(fd, True)      # an inheritable descriptor
signal.signal(signal.SIGUSR1, lambda *a: None)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
subprocess.run(['ipcmk', '-M', '4096'], check=True, capture_output=True)
subprocess.run(['ipcmk', '-S', '1'], check=True, capture_output=True)
subprocess.run(['ipcmk', '-Q'], check=True, capture_output=True)
# A daemon that outlives the execution.
subprocess.Popen(['sleep', '600'], start_new_session=True)
print(json.dumps({'sandbox': _sandbox(), 'random': random.random()}))
`

// inspect reports what a fresh interpreter in a fresh sandbox would show.
const inspect = marker + `
import os, sys, signal, json, random, subprocess
def ipcs(kind):
    out = subprocess.run(['ipcs', kind], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if l[:2] == '0x']
procs = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            procs.append(open('/proc/%s/cmdline' % p).read().replace('\0', ' ').strip())
        except OSError:
            pass
print(json.dumps({
    'sandbox': _sandbox(),
    'random': random.random(),
    'global': 'GLOBAL_LEAK' in globals(),
    'module_state': hasattr(sys.modules.get('string'), 'corral_leak'),
    'module_loaded': 'email.mime.text' in sys.modules,
    'env': os.environ.get('CORRAL_LEAK'),
    'cwd': os.getcwd(),
    'umask': os.umask(0o022),
    'tmp': os.listdir('/tmp'),
    'workspace': sorted(os.listdir('/workspace')),
    'shm': os.listdir('/dev/shm'),
    'fds': sorted(int(x) for x in os.listdir('/proc/self/fd')),
    'sigusr1': signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
    'sigterm': signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    'sigint': signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    'blocked': sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    'ipc': ipcs('-m') + ipcs('-s') + ipcs('-q'),
    'sleepers': [p for p in procs if p.startswith('sleep')],
    'argv': sys.argv,
    'main': __name__,
}))
`

type observed struct {
	Sandbox      string   `json:"sandbox"`
	Random       float64  `json:"random"`
	Global       bool     `json:"global"`
	ModuleState  bool     `json:"module_state"`
	ModuleLoaded bool     `json:"module_loaded"`
	Env          *string  `json:"env"`
	Cwd          string   `json:"cwd"`
	Umask        int      `json:"umask"`
	Tmp          []string `json:"tmp"`
	Workspace    []string `json:"workspace"`
	Shm          []string `json:"shm"`
	FDs          []int    `json:"fds"`
	SigUSR1      bool     `json:"sigusr1"`
	SigTERM      bool     `json:"sigterm"`
	SigINT       bool     `json:"sigint"`
	Blocked      []int    `json:"blocked"`
	IPC          []string `json:"ipc"`
	Sleepers     []string `json:"sleepers"`
	Argv         []string `json:"argv"`
	Main         string   `json:"main"`
}

func decode[T any](t *testing.T, r sandbox.Result) T {
	t.Helper()
	var v T
	if r.Status != sandbox.StatusSuccess {
		t.Fatalf("execution %s: %+v\nstdout: %s\nstderr: %s", r.Status, r.Error, r.Stdout, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatalf("decode %q: %v", r.Stdout, err)
	}
	return v
}

// TestNothingLeaks runs a program that changes everything it can, then, in
// the same pooled sandbox, one that looks for every change: it must see a
// fresh interpreter in a fresh sandbox. With and without the zygote, on
// both tiers.
func TestNothingLeaks(t *testing.T) {
	for _, tier := range tiers {
		for _, zygote := range []bool{true, false} {
			name := string(tier) + "/plain"
			if zygote {
				name = string(tier) + "/zygote"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, tier, zygote, 100)
				// The baseline: what an execution in a sandbox of its own,
				// without a zygote, sees (another disk size is not pooled).
				fresh := decode[observed](t, f.run("other", inspect, func(r *sandbox.ExecuteRequest) { r.Limits.DiskMB = 64 }))
				first := decode[struct {
					Sandbox string  `json:"sandbox"`
					Random  float64 `json:"random"`
				}](t, f.run("a", pollute))
				f.waitIdle(2) // the used sandbox is back, reset
				got := decode[observed](t, f.run("a", inspect))
				if got.Sandbox != first.Sandbox {
					t.Fatalf("the second execution ran in another sandbox (%s, not %s): nothing was reused", got.Sandbox, first.Sandbox)
				}
				if got.Random == first.Random {
					t.Errorf("random.random() repeated %v: the generator state leaked", got.Random)
				}
				want := fresh
				want.Sandbox, want.Random = got.Sandbox, got.Random
				gotJSON, _ := json.Marshal(got)
				wantJSON, _ := json.Marshal(want)
				if string(gotJSON) != string(wantJSON) {
					t.Errorf("state leaked into the next execution:\n got  %s\n want %s", gotJSON, wantJSON)
				}
				if fresh.Global || fresh.ModuleState || fresh.ModuleLoaded || fresh.Env != nil || fresh.Cwd != "/workspace" ||
					!slices.Equal(fresh.Tmp, []string{".corral"}) || len(fresh.Shm) > 0 || len(fresh.IPC) > 0 || len(fresh.Sleepers) > 0 ||
					!fresh.SigUSR1 || !fresh.SigTERM || !fresh.SigINT || len(fresh.Blocked) > 0 || fresh.Umask != 0o022 || fresh.Main != "__main__" {
					t.Errorf("a first execution does not look fresh: %+v", fresh)
				}
			})
		}
	}
}

// TestExitsLikeTheInterpreter: a program that leaves a file unclosed, a zip
// archive unfinished and an object with a finalizer gets from a zygote's
// child what the interpreter's exit gives it in a process of its own: the
// data written, the archive finished, the finalizer run.
func TestExitsLikeTheInterpreter(t *testing.T) {
	const program = `
import json, os, zipfile
os.makedirs('/workspace/output')
class Finalized:
    def __del__(self, open=open):  # at exit, builtins may be gone
        open('/workspace/output/finalizer.txt', 'w').write('finalizer ran')
kept = Finalized()
f = open('/workspace/output/unclosed.txt', 'w')
f.write('unclosed data')
z = zipfile.ZipFile('/workspace/output/archive.zip', 'w')
z.writestr('inner.txt', 'zipped data')
json.corral_file = open('/workspace/output/elsewhere.txt', 'w')
json.corral_file.write('held by a module')
print('done')
`
	want := map[string]string{
		"finalizer.txt": "finalizer ran",
		"unclosed.txt":  "unclosed data",
		"elsewhere.txt": "held by a module",
		"archive.zip":   "zipped data", // inner.txt of the archive
	}
	for _, zygote := range []bool{true, false} {
		t.Run(fmt.Sprintf("zygote=%v", zygote), func(t *testing.T) {
			f := newFixture(t, runtime.TierContainer, zygote, 100)
			store, err := local.New(t.TempDir(), "http://127.0.0.1:1", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			res := f.runJob("a", program, func(j *engine.Job) {
				j.Artifacts, j.ArtifactPrefix = node.BlobArtifacts{Store: store}, "out/"
			})
			if res.Status != sandbox.StatusSuccess {
				t.Fatalf("execution %s: %+v\nstderr: %s", res.Status, res.Error, res.Stderr)
			}
			for name, text := range want {
				rc, _, err := store.Get(t.Context(), "out/"+name)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				if name == "archive.zip" {
					zr, zerr := zip.NewReader(bytes.NewReader(b), int64(len(b)))
					if zerr != nil {
						t.Errorf("%s is not a finished archive (%d bytes): %v", name, len(b), zerr)
						continue
					}
					inner, zerr := zr.Open("inner.txt")
					if zerr != nil {
						t.Errorf("%s: %v", name, zerr)
						continue
					}
					b, zerr = io.ReadAll(inner)
					inner.Close()
					if zerr != nil {
						t.Errorf("%s: read inner.txt: %v", name, zerr)
						continue
					}
				}
				if string(b) != text {
					t.Errorf("%s holds %q, want %q", name, b, text)
				}
			}
		})
	}
}

// findZygote defines zygote(), the pid of the sandbox's zygote.
const findZygote = `
import os, signal
def zygote():
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                if '_corral_zygote' in open('/proc/%s/cmdline' % p).read():
                    return int(p)
            except OSError:
                pass
    raise SystemExit('no zygote')
`

// TestOneAfterAnotherOnOneCPU: a tenant that ran two executions at once
// holds two sandboxes, whose zygotes started on whichever CPUs; after
// executions one after another, both zygotes keep to one CPU (docs/pool.md,
// "Executions one after another on one CPU"). Read from inside each
// sandbox by two executions at once again.
func TestOneAfterAnotherOnOneCPU(t *testing.T) {
	if goruntime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to place")
	}
	// Room for the tenant's two and the fresh ones beside them.
	f := newFixtureOf(t, pool.Warm{Image: images.HostName, Tier: runtime.TierContainer, Language: "python", MinIdle: 1, MaxIdle: 8, Zygote: true}, 100)
	code := findZygote + marker + `
import time
try:
    with open('/proc/%d/status' % zygote()) as s:
        cpus = s.read().split('Cpus_allowed_list:')[1].split()[0]
except SystemExit:  # a sandbox made cold for the claim starts its zygote after
    cpus = '-'
time.sleep(float(os.environ.get('HOLD', '0')))
print(_sandbox(), cpus)`
	hold := func(r *sandbox.ExecuteRequest) { r.Env = map[string]string{"HOLD": "0.5"} }
	run := func(mutate ...func(*sandbox.ExecuteRequest)) ([2]string, error) {
		r := f.run("a", code, mutate...)
		fields := strings.Fields(r.Stdout)
		if r.Status != sandbox.StatusSuccess || len(fields) != 2 {
			return [2]string{}, fmt.Errorf("%s %+v\nstdout %q\nstderr %s", r.Status, r.Error, r.Stdout, r.Stderr)
		}
		return [2]string{fields[0], fields[1]}, nil
	}
	pair := func() map[string]string { // sandbox -> its zygote's CPUs
		var wg sync.WaitGroup
		var got [2][2]string
		var errs [2]error
		for i := range got {
			wg.Go(func() { got[i], errs[i] = run(hold) })
		}
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatal(err)
		}
		if got[0][0] == got[1][0] {
			t.Fatalf("two executions at once ran in one sandbox: %v", got)
		}
		return map[string]string{got[0][0]: got[0][1], got[1][0]: got[1][1]}
	}
	// The pool holds one ready sandbox: the second of two executions at
	// once gets one made cold, which starts its zygote after its reset.
	pair()
	f.waitReset()
	before := pair()
	f.waitReset()
	for range 4 {
		if _, err := run(); err != nil {
			t.Fatal(err)
		}
	}
	f.waitReset()
	after := pair()
	t.Logf("zygotes' CPUs: at first %v, after executions one after another %v", before, after)
	var cpus []string
	for sb, c := range after {
		cpus = append(cpus, c)
		if _, ok := before[sb]; !ok {
			t.Errorf("sandbox %s is not one of the tenant's two (%v)", sb, before)
		}
	}
	if cpus[0] != cpus[1] || cpus[0] == "-" {
		t.Errorf("the tenant's zygotes keep to CPUs %v, want one CPU for both", after)
	}
}

// TestTenantsDoNotShare checks that a sandbox one tenant used never serves
// another.
func TestTenantsDoNotShare(t *testing.T) {
	f := newFixture(t, runtime.TierContainer, true, 100)
	a := decode[observed](t, f.run("a", inspect))
	f.waitIdle(2)
	for range 3 {
		b := decode[observed](t, f.run("b", inspect))
		if b.Sandbox == a.Sandbox {
			t.Fatalf("tenant b ran in the sandbox tenant a used (%s)", a.Sandbox)
		}
		f.waitIdle(2)
	}
	again := decode[observed](t, f.run("a", inspect))
	if again.Sandbox != a.Sandbox {
		t.Errorf("tenant a did not get its own sandbox back")
	}
}

// TestTamperedSandboxIsReplaced: an execution that kills, stops or changes
// the limits of the zygote, or that hits a limit, leaves a sandbox that is
// destroyed, not reused; the tenant's next execution is unaffected.
func TestTamperedSandboxIsReplaced(t *testing.T) {
	for _, tier := range tiers {
		for _, c := range []struct {
			name, code string
			mutate     func(*sandbox.ExecuteRequest)
			status     sandbox.Status
		}{
			{"kill", findZygote + "os.kill(zygote(), signal.SIGKILL)", nil, sandbox.StatusSuccess},
			{"stop", findZygote + "os.kill(zygote(), signal.SIGSTOP)", nil, sandbox.StatusSuccess},
			{"rlimit", findZygote + "import resource\nresource.prlimit(zygote(), resource.RLIMIT_NOFILE, (64, 64))", nil, sandbox.StatusSuccess},
			{"nice", findZygote + "os.setpriority(os.PRIO_PROCESS, zygote(), 19)", nil, sandbox.StatusSuccess},
			// The default memory limit: on gVisor a lower one also lowers
			// the task limit, fixed at creation, and is not served warm.
			{"oom", "b = bytearray(800 << 20)\nb[::4096] = b'x' * len(b[::4096])", nil, sandbox.StatusFailed},
		} {
			t.Run(string(tier)+"/"+c.name, func(t *testing.T) {
				f := newFixture(t, tier, true, 100)
				before := decode[observed](t, f.run("a", inspect))
				f.waitIdle(2)
				mutate := []func(*sandbox.ExecuteRequest){}
				if c.mutate != nil {
					mutate = append(mutate, c.mutate)
				}
				r := f.run("a", c.code+"\n"+marker+"\nprint(_sandbox())", mutate...)
				if r.Status != c.status {
					t.Fatalf("tampering: %s %+v\n%s", r.Status, r.Error, r.Stderr)
				}
				t.Logf("tampering: %s %+v stdout %q", r.Status, r.Error, r.Stdout)
				if c.status == sandbox.StatusSuccess && strings.TrimSpace(r.Stdout) != before.Sandbox {
					t.Fatalf("tampering ran in sandbox %q, not the tenant's %s", r.Stdout, before.Sandbox)
				}
				f.waitReset() // the release decides in the background
				f.waitIdle(1)
				after := decode[observed](t, f.run("a", inspect))
				if after.Sandbox == before.Sandbox {
					t.Errorf("the tampered sandbox %s served again", before.Sandbox)
				}
			})
		}
	}
}

// TestMaxUses: with max_uses 1 every execution gets a sandbox nobody used.
func TestMaxUses(t *testing.T) {
	f := newFixture(t, runtime.TierContainer, true, 1)
	seen := map[string]bool{}
	for range 4 {
		o := decode[observed](t, f.run("a", inspect))
		if seen[o.Sandbox] {
			t.Fatalf("sandbox %s served twice with max_uses 1", o.Sandbox)
		}
		seen[o.Sandbox] = true
		f.waitIdle(1)
	}
}

// TestBackToBackWaitsForReset: a tenant whose next request comes while
// its sandbox is still being reset, with no fresh one ready (the refill is
// still creating the one the first request took), waits for its own
// sandbox rather than starting cold. The wait is measured
// (corral_pool_return_wait_seconds): a run without one proves nothing.
func TestBackToBackWaitsForReset(t *testing.T) {
	f := newFixture(t, runtime.TierContainer, true, 100)
	// Quick, so the refill has no time to make a fresh sandbox (a quarter
	// of a second and more here), and leaving files, so the reset (which
	// empties /workspace) is still busy when the next claim comes.
	const program = marker + `
for i in range(2000):
    open('/workspace/f%d' % i, 'w').close()
print(_sandbox())
`
	ran := func() string {
		t.Helper()
		r := f.run("a", program)
		if r.Status != sandbox.StatusSuccess {
			t.Fatalf("execution %s: %+v\n%s", r.Status, r.Error, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	first := ran()
	second := ran()
	if n := f.waits(); n != 1 {
		t.Fatalf("%d claims waited for a reset, want the second one", n)
	}
	if second != first {
		t.Errorf("the claim that waited ran in sandbox %s, not the tenant's %s", second, first)
	}
	for range 4 {
		ran()
	}
	if n := f.count(f.m.PoolClaims, "miss"); n != 0 {
		t.Errorf("%v of 6 back-to-back claims were cold starts", n)
	}
}

// TestClaimAppliesLimits: a pooled sandbox gets the request's limits; a
// request the pool cannot serve exactly (another disk size) is a cold
// start that still works.
func TestClaimAppliesLimits(t *testing.T) {
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			f := newFixture(t, tier, true, 100)
			r := f.run("a", "b = bytearray(300 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('ok')", func(r *sandbox.ExecuteRequest) { r.Limits.MemoryMB = 128 })
			if r.Error == nil || r.Error.Type != sandbox.ErrOOM {
				t.Fatalf("300 MB under a 128 MB limit: %s %+v", r.Status, r.Error)
			}
			r = f.run("a", "b = bytearray(300 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('ok')", func(r *sandbox.ExecuteRequest) { r.Limits.MemoryMB = 1024 })
			if r.Status != sandbox.StatusSuccess || r.Stdout != "ok\n" {
				t.Fatalf("300 MB under a 1024 MB limit: %s %+v %s", r.Status, r.Error, r.Stderr)
			}
			r = f.run("a", "print('cold')", func(r *sandbox.ExecuteRequest) { r.Limits.DiskMB = 64 })
			if r.Status != sandbox.StatusSuccess || r.Stdout != "cold\n" {
				t.Fatalf("cold start: %s %+v %s", r.Status, r.Error, r.Stderr)
			}
		})
	}
}

// TestAddTier: a gvisor class left out because the engine had no gVisor
// runtime starts when the tier arrives, and executions then use it.
func TestAddTier(t *testing.T) {
	dir := t.TempDir()
	var container, gvisor []runtime.Runtime
	for _, rt := range testenv.Runtimes(t, dir) {
		if rt.Tier() == runtime.TierGVisor {
			gvisor = append(gvisor, rt)
		} else {
			container = append(container, rt)
		}
	}
	cfg := engine.DefaultConfig()
	cfg.CacheDir = testenv.CacheDir()
	cfg.UID, cfg.GID = 1000, 1000
	store := images.NewStore(filepath.Join(dir, "images"), 1000, 1000)
	fl := fleet.New(fleet.Config{}, container, store, nil)
	t.Cleanup(fl.Close)
	e, err := engine.New(cfg, fl, store, filepath.Join(dir, "engine"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	pc := pool.DefaultConfig()
	pc.Warm = []pool.Warm{{Image: images.HostName, Tier: runtime.TierGVisor, Language: "python", MinIdle: 1, MaxIdle: 1}}
	m := metrics.New()
	p, skipped := pool.New(t.Context(), fl, e, pc, m, slog.New(slog.NewTextHandler(testLog{t}, nil)))
	t.Cleanup(p.Close)
	if len(skipped) != 1 || len(p.Idle()) != 0 {
		t.Fatalf("without the tier: skipped %v, classes %v; want the class left out", skipped, p.Idle())
	}
	if err := fl.AddRuntime(gvisor[0]); err != nil {
		t.Fatal(err)
	}
	if skipped := p.AddTier(t.Context(), runtime.TierGVisor); len(skipped) != 0 {
		t.Fatal(skipped)
	}
	if skipped := p.AddTier(t.Context(), runtime.TierGVisor); len(skipped) != 0 || len(p.Idle()) != 1 {
		t.Fatalf("a second AddTier: skipped %v, classes %v; want one class", skipped, p.Idle())
	}
	f := &fixture{t: t, e: e, p: p, m: m, tier: runtime.TierGVisor}
	f.waitIdle(1)
	res := f.run("alpha", "print(6 * 7)")
	if res.Status != sandbox.StatusSuccess || res.Tier != "gvisor" || res.Stdout != "42\n" {
		t.Fatalf("execution on the added tier: %s on %s: %q %+v", res.Status, res.Tier, res.Stdout, res.Error)
	}
	var hits dto.Metric
	if err := m.PoolClaims.WithLabelValues(string(runtime.TierGVisor), images.HostName, "hit").Write(&hits); err != nil {
		t.Fatal(err)
	}
	if n := hits.GetCounter().GetValue(); n != 1 {
		t.Errorf("%v pool hits on gvisor, want 1", n)
	}
}

// TestClaimOverUsageIsReplaced: a tenant's ready sandbox that holds more
// memory than its next claim's limit leaves room for is destroyed, counted
// as replaced for that reason, and the execution runs elsewhere. In
// production that is gVisor right after a big program, while the Sentry
// hands its memory back to the host (about 1 GB/s); here a live process
// holds the memory, so the test does not race the Sentry. A claim tighter
// than what even a fresh sandbox holds is served cold, with its own limits,
// and leaves the fresh ones alone.
func TestClaimOverUsageIsReplaced(t *testing.T) {
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			// On gVisor the task limit, fixed at creation, follows the memory
			// limit below 6 MB a task; with 64 tasks, claims from 384 MB up
			// match the class's 512 MB.
			f := newFixture(t, tier, true, 100, func(c *engine.Config) { c.Pids = 64 })
			first := decode[observed](t, f.run("a", inspect))
			f.waitIdle(2)
			used := f.p.IdleSandboxes("a")
			if len(used) != 1 {
				t.Fatalf("tenant a has %d ready sandboxes, want 1", len(used))
			}
			h := runtimetest.HoldMemory(t, used[0], 400)
			claims := f.count(f.m.PoolClaims, "hit") + f.count(f.m.PoolClaims, "miss")
			r := f.run("a", inspect, func(r *sandbox.ExecuteRequest) { r.Limits.MemoryMB = 384 })
			got := decode[observed](t, r)
			if got.Sandbox == first.Sandbox {
				t.Fatalf("a claim for 384 MB ran in the sandbox that holds 400 MB")
			}
			if n := f.count(f.m.PoolReplaced, "limit_below_usage"); n != 1 {
				t.Errorf("corral_pool_replaced_total{reason=limit_below_usage} = %v, want 1", n)
			}
			if n := f.count(f.m.PoolReplaced, "error"); n != 0 {
				t.Errorf("corral_pool_replaced_total{reason=error} = %v, want 0", n)
			}
			if n := f.count(f.m.PoolClaims, "hit") + f.count(f.m.PoolClaims, "miss"); n != claims+1 {
				t.Errorf("%v claims counted for one execution", n-claims)
			}
			if _, err := h.Wait(t, time.Minute); !errors.Is(err, agent.ErrLost) {
				t.Errorf("the replaced sandbox's holder: %v, want it lost with its sandbox", err)
			}
			if holder, ok := f.e.Fleet().Holder(used[0].ID()); ok {
				t.Errorf("the replaced sandbox %s is still in the fleet, held by %q", used[0].ID(), holder)
			}

			if tier != runtime.TierContainer {
				return // a tighter limit lowers gVisor's task limit: not this class
			}
			f.waitIdle(2)
			fresh := len(f.p.IdleSandboxes(""))
			misses := f.count(f.m.PoolClaims, "miss")
			r = f.run("b", "print('ok')", func(r *sandbox.ExecuteRequest) { r.Limits.MemoryMB = 24 })
			if r.Status != sandbox.StatusSuccess || r.Stdout != "ok\n" {
				t.Fatalf("a claim for 24 MB: %s %+v %s", r.Status, r.Error, r.Stderr)
			}
			if n := f.count(f.m.PoolClaims, "miss"); n != misses+1 {
				t.Errorf("a claim for 24 MB was not a cold start (%v misses)", n-misses)
			}
			if n := f.count(f.m.PoolReplaced, "limit_below_usage"); n != 1 {
				t.Errorf("a claim for 24 MB replaced %v ready sandboxes", n-1)
			}
			if n := len(f.p.IdleSandboxes("")); n < fresh {
				t.Errorf("%d fresh sandboxes ready after a claim for 24 MB, %d before", n, fresh)
			}
		})
	}
}
