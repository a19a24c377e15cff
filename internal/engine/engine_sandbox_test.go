package engine_test

// The engine on real runc and runsc sandboxes, as root: the verdicts of
// real programs in every language on both tiers, the limits that produce
// them, the host's view of a fork bomb, timings of a timeout and a cancel.
// They skip as an unprivileged user (testenv), and fail in strict mode.

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

type verdictCase struct {
	name     string
	lang     string
	code     string
	limits   sandbox.Limits
	status   sandbox.Status
	errType  sandbox.ErrorType
	stdout   string // exact stdout, if set
	inStderr string // substring of stderr, if set
	inMsg    string // substring of the error message, if set
}

// forkBombTimeout leaves gVisor, where a fork costs tens of milliseconds,
// time to fill its process table.
const forkBombTimeout = 10000

// verdictCases are real programs for every verdict in every language.
var verdictCases = []verdictCase{
	// python
	{name: "hello", lang: "python", code: "print(sum(range(100)))", status: sandbox.StatusSuccess, stdout: "4950\n"},
	{name: "syntax", lang: "python", code: "print(\n", status: sandbox.StatusFailed, errType: sandbox.ErrCompile, inMsg: "was never closed"},
	{name: "raise", lang: "python", code: "raise ValueError('boom')", status: sandbox.StatusFailed, errType: sandbox.ErrRuntime, inMsg: "ValueError: boom", inStderr: "File \"main.py\", line 1"},
	{name: "timeout", lang: "python", code: "while True: pass", limits: sandbox.Limits{TimeoutMS: 1000}, status: sandbox.StatusFailed, errType: sandbox.ErrTimeout},
	{name: "oom", lang: "python", code: "b = bytearray(1 << 30)\nprint(len(b))", limits: sandbox.Limits{MemoryMB: 128}, status: sandbox.StatusFailed, errType: sandbox.ErrOOM},
	{name: "forkbomb", lang: "python", code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", limits: sandbox.Limits{TimeoutMS: forkBombTimeout}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit},
	{name: "disk", lang: "python", code: "with open('/workspace/big', 'wb') as f:\n    for _ in range(2048):\n        f.write(b'x' * (1 << 20))", limits: sandbox.Limits{DiskMB: 64}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit, inMsg: "disk full"},
	// javascript
	{name: "hello", lang: "javascript", code: "console.log([...Array(100).keys()].reduce((a, b) => a + b))", status: sandbox.StatusSuccess, stdout: "4950\n"},
	{name: "syntax", lang: "javascript", code: "function (", status: sandbox.StatusFailed, errType: sandbox.ErrCompile, inMsg: "SyntaxError"},
	{name: "throw", lang: "javascript", code: "throw new TypeError('nope')", status: sandbox.StatusFailed, errType: sandbox.ErrRuntime, inMsg: "TypeError: nope"},
	{name: "timeout", lang: "javascript", code: "while (true) {}", limits: sandbox.Limits{TimeoutMS: 1000}, status: sandbox.StatusFailed, errType: sandbox.ErrTimeout},
	{name: "oom", lang: "javascript", code: "const b = Buffer.alloc(1 << 30, 1); console.log(b.length)", limits: sandbox.Limits{MemoryMB: 128}, status: sandbox.StatusFailed, errType: sandbox.ErrOOM},
	{name: "forkbomb", lang: "javascript", code: "const { spawn } = require('child_process');\nfor (;;) { try { spawn('sleep', ['100']) } catch (e) {} }", limits: sandbox.Limits{TimeoutMS: forkBombTimeout}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit},
	{name: "disk", lang: "javascript", code: "const fs = require('fs'); const fd = fs.openSync('/workspace/big', 'w'); const b = Buffer.alloc(1 << 20, 120);\nfor (let i = 0; i < 2048; i++) fs.writeSync(fd, b)", limits: sandbox.Limits{DiskMB: 64}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit, inMsg: "disk full"},
	// bash
	{name: "hello", lang: "bash", code: "echo $(( 99 * 100 / 2 ))", status: sandbox.StatusSuccess, stdout: "4950\n"},
	{name: "syntax", lang: "bash", code: "if then fi (", status: sandbox.StatusFailed, errType: sandbox.ErrCompile, inMsg: "syntax error"},
	{name: "exit", lang: "bash", code: "echo failing >&2; exit 3", status: sandbox.StatusFailed, errType: sandbox.ErrRuntime, inMsg: "code 3"},
	{name: "timeout", lang: "bash", code: "while :; do :; done", limits: sandbox.Limits{TimeoutMS: 1000}, status: sandbox.StatusFailed, errType: sandbox.ErrTimeout},
	{name: "oom", lang: "bash", code: "x=({1..100000000}); echo ${#x[@]}", limits: sandbox.Limits{MemoryMB: 128}, status: sandbox.StatusFailed, errType: sandbox.ErrOOM},
	{name: "forkbomb", lang: "bash", code: "while :; do sleep 100 & done", limits: sandbox.Limits{TimeoutMS: forkBombTimeout}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit},
	{name: "disk", lang: "bash", code: "dd if=/dev/zero of=/workspace/big bs=1M count=2048", limits: sandbox.Limits{DiskMB: 64}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit, inMsg: "disk full"},
	// go
	{name: "hello", lang: "go", code: "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(4950) }\n", status: sandbox.StatusSuccess, stdout: "4950\n"},
	{name: "compile", lang: "go", code: "package main\n\nfunc main() { undefinedThing() }\n", status: sandbox.StatusFailed, errType: sandbox.ErrCompile, inMsg: "undefined: undefinedThing"},
	{name: "panic", lang: "go", code: "package main\n\nfunc main() { panic(\"boom\") }\n", status: sandbox.StatusFailed, errType: sandbox.ErrRuntime, inStderr: "panic: boom", inMsg: "code 2"},
	{name: "timeout", lang: "go", code: "package main\n\nfunc main() { for {} }\n", limits: sandbox.Limits{TimeoutMS: 1000}, status: sandbox.StatusFailed, errType: sandbox.ErrTimeout},
	{name: "oom", lang: "go", code: "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tb := make([]byte, 1<<30)\n\tfor i := range b { b[i] = 1 }\n\tfmt.Println(len(b))\n}\n", limits: sandbox.Limits{MemoryMB: 128}, status: sandbox.StatusFailed, errType: sandbox.ErrOOM},
	{name: "forkbomb", lang: "go", code: "package main\n\nimport \"os/exec\"\n\nfunc main() {\n\tfor {\n\t\t_ = exec.Command(\"sleep\", \"100\").Start()\n\t}\n}\n", limits: sandbox.Limits{TimeoutMS: forkBombTimeout}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit},
	{name: "disk", lang: "go", code: "package main\n\nimport \"os\"\n\nfunc main() {\n\tf, _ := os.Create(\"/workspace/big\")\n\tb := make([]byte, 1<<20)\n\tfor i := 0; i < 2048; i++ {\n\t\tif _, err := f.Write(b); err != nil {\n\t\t\tpanic(err)\n\t\t}\n\t}\n}\n", limits: sandbox.Limits{DiskMB: 64}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit},
	// c
	{name: "hello", lang: "c", code: "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 4950); return 0; }\n", status: sandbox.StatusSuccess, stdout: "4950\n"},
	{name: "compile", lang: "c", code: "int main(void) { return undefined_thing; }\n", status: sandbox.StatusFailed, errType: sandbox.ErrCompile, inMsg: "undefined_thing"},
	{name: "segfault", lang: "c", code: "int main(void) { volatile int *p = 0; return *p; }\n", status: sandbox.StatusFailed, errType: sandbox.ErrRuntime, inMsg: "SIGSEGV"},
	{name: "timeout", lang: "c", code: "int main(void) { for (;;) ; }\n", limits: sandbox.Limits{TimeoutMS: 1000}, status: sandbox.StatusFailed, errType: sandbox.ErrTimeout},
	{name: "oom", lang: "c", code: "#include <stdlib.h>\nint main(void) { volatile char *p = malloc(1 << 30); for (long i = 0; i < (1L << 30); i += 4096) p[i] = 1; return 0; }\n", limits: sandbox.Limits{MemoryMB: 128}, status: sandbox.StatusFailed, errType: sandbox.ErrOOM},
	{name: "forkbomb", lang: "c", code: "#include <unistd.h>\nint main(void) { for (;;) fork(); }\n", limits: sandbox.Limits{TimeoutMS: forkBombTimeout}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit},
	{name: "disk", lang: "c", code: "#include <stdio.h>\nint main(void) { static char b[1 << 20]; FILE *f = fopen(\"/workspace/big\", \"w\"); for (int i = 0; i < 2048; i++) if (fwrite(b, 1, sizeof b, f) != sizeof b) { perror(\"write\"); return 1; } return fclose(f) != 0; }\n", limits: sandbox.Limits{DiskMB: 64}, status: sandbox.StatusFailed, errType: sandbox.ErrResourceLimit},
}

var tiers = []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor}

// TestVerdicts runs every verdict case on both tiers.
func TestVerdicts(t *testing.T) {
	e := testenv.Engine(t)
	testenv.Warm(t, e)
	// CPU-bound cases share two cores; a few at a time keeps timings honest.
	sem := make(chan struct{}, 3)
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			for _, c := range verdictCases {
				t.Run(c.lang+"/"+c.name, func(t *testing.T) {
					t.Parallel()
					sem <- struct{}{}
					defer func() { <-sem }()
					job, err := e.Prepare(sandbox.ExecuteRequest{Language: c.lang, Code: c.code, Limits: c.limits, Isolation: tier})
					if err != nil {
						t.Fatal(err)
					}
					start := time.Now()
					res := e.Run(t.Context(), job, nil)
					wall := time.Since(start)
					checkResult(t, c, res)
					if res.Tier != string(tier) {
						t.Errorf("tier = %s, want %s", res.Tier, tier)
					}
					if c.errType == sandbox.ErrTimeout && wall < time.Duration(c.limits.TimeoutMS)*time.Millisecond {
						t.Errorf("timed out after %v, before its %d ms limit", wall, c.limits.TimeoutMS)
					}
				})
			}
		})
	}
}

func checkResult(t *testing.T, c verdictCase, res sandbox.Result) {
	t.Helper()
	if res.Status != c.status {
		t.Errorf("status = %s, want %s (error %+v, stderr %q)", res.Status, c.status, res.Error, clip(res.Stderr))
	}
	if c.errType == "" && res.Error != nil {
		t.Errorf("error = %+v, want none", res.Error)
	}
	if c.errType != "" {
		if res.Error == nil || res.Error.Type != c.errType {
			t.Fatalf("error = %+v, want type %s (stdout %q, stderr %q)", res.Error, c.errType, clip(res.Stdout), clip(res.Stderr))
		}
		if c.inMsg != "" && !strings.Contains(res.Error.Message, c.inMsg) {
			t.Errorf("message %q does not contain %q", res.Error.Message, c.inMsg)
		}
		if res.Error.Retryable != (c.errType == sandbox.ErrInternal) {
			t.Errorf("retryable = %v", res.Error.Retryable)
		}
	}
	if c.stdout != "" && res.Stdout != c.stdout {
		t.Errorf("stdout = %q, want %q", res.Stdout, c.stdout)
	}
	if c.inStderr != "" && !strings.Contains(res.Stderr, c.inStderr) {
		t.Errorf("stderr %q does not contain %q", clip(res.Stderr), c.inStderr)
	}
	if c.status == sandbox.StatusSuccess {
		if res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("exit code = %v, want 0", res.ExitCode)
		}
		if res.PeakMemoryMB <= 0 {
			t.Errorf("peak memory = %d", res.PeakMemoryMB)
		}
	}
	// The limit behind a resource verdict is among the limits hit; a
	// program that met none lists none.
	want := map[sandbox.ErrorType][]sandbox.Limit{sandbox.ErrOOM: {sandbox.LimitMemory},
		sandbox.ErrResourceLimit: {sandbox.LimitProcesses, sandbox.LimitDisk}}[c.errType]
	if c.status == sandbox.StatusSuccess && len(res.LimitsHit) > 0 {
		t.Errorf("limits_hit %+v, want none", res.LimitsHit)
	}
	if len(want) > 0 && !slices.ContainsFunc(res.LimitsHit, func(h sandbox.LimitHit) bool { return slices.Contains(want, h.Limit) }) {
		t.Errorf("limits_hit %+v, want one of %v", res.LimitsHit, want)
	}
	if c.errType == sandbox.ErrOOM && res.PeakMemoryMB > c.limits.MemoryMB {
		t.Errorf("peak memory %d MB above the %d MB limit", res.PeakMemoryMB, c.limits.MemoryMB)
	}
}

func clip(s string) string {
	if len(s) > 600 {
		return s[:300] + " … " + s[len(s)-300:]
	}
	return s
}

// TestTimeoutAnswered checks, one execution at a time so that other tests'
// load does not blur it, that a busy loop with a 1 s limit is answered
// within 1.5 s of the program's start, in every language on both tiers.
func TestTimeoutAnswered(t *testing.T) {
	e := testenv.Engine(t)
	testenv.Warm(t, e)
	for _, tier := range tiers {
		for _, c := range verdictCases {
			if c.errType != sandbox.ErrTimeout {
				continue
			}
			t.Run(string(tier)+"/"+c.lang, func(t *testing.T) {
				job, err := e.Prepare(sandbox.ExecuteRequest{Language: c.lang, Code: c.code, Limits: c.limits, Isolation: tier})
				if err != nil {
					t.Fatal(err)
				}
				res := e.Run(t.Context(), job, nil)
				if res.Error == nil || res.Error.Type != sandbox.ErrTimeout {
					t.Fatalf("verdict %+v", res.Error)
				}
				answered := res.FinishedAt.Sub(res.StartedAt)
				if answered > 1500*time.Millisecond {
					t.Errorf("1 s timeout answered %v after the program started", answered)
				}
				t.Logf("answered %v after start; ran %d ms", answered, res.DurationMS)
			})
		}
	}
}

// hostProcesses counts the host's processes.
func hostProcesses() int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if c := e.Name()[0]; c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// sandboxProcesses counts the host's processes that belong to sandbox id:
// in its cgroup (runc's tasks) or naming it (runsc's sandbox and gofer).
func sandboxProcesses(id string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cg), id) || strings.Contains(string(cmd), id) {
			n++
		}
	}
	return n
}

// idSink learns which sandbox runs an execution.
type idSink struct {
	mu sync.Mutex
	id string
}

func (s *idSink) Stdout([]byte) {}
func (s *idSink) Stderr([]byte) {}
func (s *idSink) Sandbox(id string) {
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
}

func (s *idSink) sandbox() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// TestForkBombHostUnaffected watches the host's process count while a fork
// bomb runs in each tier: it may rise by no more than the sandbox's pids
// limit, and every process of the sandbox is gone after the run. (Other
// work on a shared machine moves the host's count too; the sandbox's own
// processes are told apart by its id.)
func TestForkBombHostUnaffected(t *testing.T) {
	e := testenv.Engine(t)
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			before := hostProcesses()
			var peak, mine int
			var mu sync.Mutex
			sink := &idSink{}
			ctx, stop := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					n, m := hostProcesses(), 0
					if id := sink.sandbox(); id != "" {
						m = sandboxProcesses(id)
					}
					mu.Lock()
					peak, mine = max(peak, n), max(mine, m)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond) // the sampling period
				}
			}()
			job, err := e.Prepare(sandbox.ExecuteRequest{Language: "c", Code: "#include <unistd.h>\nint main(void) { for (;;) fork(); }\n",
				Limits: sandbox.Limits{TimeoutMS: 2000}, Isolation: tier})
			if err != nil {
				t.Fatal(err)
			}
			res := e.Run(t.Context(), job, sink)
			stop()
			wg.Wait()
			if res.Error == nil || res.Error.Type != sandbox.ErrResourceLimit {
				t.Fatalf("fork bomb verdict %+v", res.Error)
			}
			// gVisor shows the host a few stub threads a task, within its
			// host cgroup limit; runc's tasks are the host's own.
			bound := 2 * int(e.Config().Pids)
			if rise := peak - before; rise > bound {
				t.Errorf("host processes rose by %d during the bomb; the bound is %d", rise, bound)
			}
			id := sink.sandbox()
			if id == "" || mine == 0 {
				t.Fatalf("never saw the sandbox's processes (sandbox %q): the check below would prove nothing", id)
			}
			// The run tears the sandbox down before it returns; the host
			// may take a moment to reap what was killed.
			if !testenv.Eventually(t, 10*time.Second, func() bool { return sandboxProcesses(id) == 0 }) {
				t.Errorf("%d processes of sandbox %s left 10s after the bomb", sandboxProcesses(id), id)
			}
			t.Logf("%s: host processes before %d, peak %d; the sandbox's own peak %d", tier, before, peak, mine)
		})
	}
}

// keeper lends one sandbox to every execution, as a session does.
type keeper struct {
	e  *engine.Engine
	mu sync.Mutex
	sb runtime.Sandbox
}

func (k *keeper) Acquire(ctx context.Context, c fleet.Claim) (*fleet.Lease, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sb == nil {
		sb, err := k.e.Fleet().Create(ctx, c.Tier, c.Spec, c.Image, fleet.HolderSession)
		if err != nil {
			return nil, err
		}
		k.sb = sb
	}
	return fleet.NewLease(k.sb, fleet.Kept, nil, func(bool) {}), nil
}

// TestKeptSandboxLimitsHit runs a fork bomb that recovers, then a failing
// program, in one kept sandbox: the first record names the process limit,
// the second neither inherits it nor its verdict (the pids cgroup counts
// refused forks over the sandbox's life).
func TestKeptSandboxLimitsHit(t *testing.T) {
	e := testenv.Engine(t)
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			k := &keeper{e: e}
			t.Cleanup(func() {
				if k.sb != nil {
					e.Fleet().Destroy(k.sb)
				}
			})
			run := func(code string) sandbox.Result {
				job, err := e.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: code, Isolation: tier,
					Limits: sandbox.Limits{TimeoutMS: 20000, MemoryMB: 512, DiskMB: 64}})
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Acquire(t.Context(), job, k); err != nil {
					t.Fatal(err)
				}
				return e.Run(t.Context(), job, nil)
			}
			// The bomb in the background of a script that surely exits 0:
			// its sleep and the subshell that runs the bomb are forked
			// before the sandbox fills, and wait forks nothing (see
			// fork-bomb-recovered in test/hostile).
			bomb := run("sleep 3 & s=$!\n( :(){ :|:& };: ) &\nwait $s")
			if bomb.Status != sandbox.StatusSuccess || len(bomb.LimitsHit) != 1 || bomb.LimitsHit[0].Limit != sandbox.LimitProcesses ||
				!strings.Contains(bomb.Summary, "\nlimits hit: processes (") {
				t.Fatalf("fork bomb: %s %+v, limits_hit %+v, summary:\n%s", bomb.Status, bomb.Error, bomb.LimitsHit, bomb.Summary)
			}
			next := run("echo failing >&2; exit 3")
			if next.Error == nil || next.Error.Type != sandbox.ErrRuntime || len(next.LimitsHit) != 0 {
				t.Errorf("the next program in the sandbox: %s %+v, limits_hit %+v", next.Status, next.Error, next.LimitsHit)
			}
		})
	}
}

// TestReproducibleEnvironment checks the fixed environment of docs/ARCHITECTURE.md ("Reproducibility"): UTC,
// C.UTF-8, hash seed 0, home and cwd /workspace, fixed hostname, sorted env,
// caller variables merged.
func TestReproducibleEnvironment(t *testing.T) {
	e := testenv.Engine(t)
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			code := `import os, socket, time
print(os.getcwd(), os.environ['HOME'], os.environ['TZ'], os.environ['LANG'], socket.gethostname(), time.strftime('%Z'), hash('corral'))
keys = [k for k in os.environ]
print(os.environ.get('GREETING'), keys == sorted(keys))`
			var outs []string
			for i := 0; i < 2; i++ {
				job, err := e.Prepare(sandbox.ExecuteRequest{Language: "python", Code: code, Isolation: tier, Env: map[string]string{"GREETING": "hi"}})
				if err != nil {
					t.Fatal(err)
				}
				res := e.Run(t.Context(), job, nil)
				if res.Status != sandbox.StatusSuccess {
					t.Fatalf("%+v %s", res.Error, res.Stderr)
				}
				outs = append(outs, res.Stdout)
			}
			lines := strings.Split(outs[0], "\n")
			if len(lines) < 2 {
				t.Fatalf("output %q, want two lines", outs[0])
			}
			f := strings.Fields(lines[0])
			if len(f) != 7 || f[0] != "/workspace" || f[1] != "/workspace" || f[2] != "UTC" || f[3] != "C.UTF-8" || f[4] != "sandbox" || f[5] != "UTC" {
				t.Errorf("environment line %q", lines[0])
			}
			if lines[1] != "hi True" {
				t.Errorf("caller env / sorted: %q", lines[1])
			}
			if outs[0] != outs[1] {
				t.Errorf("two runs differ: %q vs %q", outs[0], outs[1])
			}
		})
	}
}

// TestCancel ends a running execution as cancelled, within a second, on
// both tiers.
func TestCancel(t *testing.T) {
	e := testenv.Engine(t)
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			if _, took := runCancelled(t, e, tier); took > time.Second {
				t.Errorf("cancel took %v", took)
			}
		})
	}
}
