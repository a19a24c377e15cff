package collect

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/sandbox"
)

var update = flag.Bool("update", false, "rewrite golden files")

var limits = sandbox.Limits{TimeoutMS: 1000, MemoryMB: 128, CPUCores: 1, DiskMB: 64}

// record builds a final record the way the engine does: output through a
// Stream (so the head/tail marker is the real one), the verdict from facts.
func record(f Facts, stdout, stderr string) sandbox.Result {
	out, errs := NewStream(DefaultKeep), NewStream(DefaultKeep)
	out.Write([]byte(stdout))
	errs.Write([]byte(stderr))
	res := sandbox.Result{ExecutionID: "ex_test", Language: "python", Limits: limits,
		Stdout: out.Text(), StdoutBytes: out.Bytes(), StdoutLines: out.Lines(), StdoutTruncated: out.Truncated(),
		Stderr: errs.Text(), StderrBytes: errs.Bytes(), StderrLines: errs.Lines(), StderrTruncated: errs.Truncated()}
	f.Stderr = res.Stderr
	f.TimeoutMS, f.MemoryMB, f.DiskMB = limits.TimeoutMS, limits.MemoryMB, limits.DiskMB
	res.Status, res.Error = Verdict(f)
	res.LimitsHit = LimitsHit(f)
	if f.Exited && !f.TimedOut && !f.Cancelled {
		code := f.ExitCode
		res.ExitCode, res.Signal = &code, f.Signal
	}
	return res
}

func lines(n int, format string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, format+"\n", i)
	}
	return b.String()
}

func withArtifacts(res sandbox.Result, paths ...string) sandbox.Result {
	for _, p := range paths {
		res.Artifacts = append(res.Artifacts, sandbox.Artifact{Path: p, Size: 100})
	}
	return res
}

const traceback = `Traceback (most recent call last):
  File "/workspace/main.py", line 4, in <module>
    print(ratio(1, 0))
          ^^^^^^^^^^^
  File "/workspace/main.py", line 2, in ratio
    return a / b
           ~~^~~
ZeroDivisionError: division by zero
`

// summaryCases are one record per verdict, plus the shapes that need
// cutting.
func summaryCases() []struct {
	name string
	res  sandbox.Result
	max  int
} {
	many := make([]string, 500)
	for i := range many {
		many[i] = fmt.Sprintf("frames/frame_%04d.png", i)
	}
	internal := sandbox.Result{ExecutionID: "ex_test", Language: "python", Limits: limits, Status: sandbox.StatusFailed,
		Error: &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: node n1 lost: no heartbeat for 31s; retry", Retryable: true}}
	input := sandbox.Result{ExecutionID: "ex_test", Language: "python", Limits: limits, Status: sandbox.StatusFailed,
		Error: &sandbox.Failure{Type: sandbox.ErrInput, Message: "files[0].url: GET https://data.example/in.csv: 404 Not Found"}}
	queuedCancel := sandbox.Result{ExecutionID: "ex_test", Language: "python", Limits: limits, Status: sandbox.StatusCancelled,
		Error: &sandbox.Failure{Type: sandbox.ErrCancelled, Message: "the execution was cancelled before it started"}}
	return []struct {
		name string
		res  sandbox.Result
		max  int
	}{
		{"success", withArtifacts(record(Facts{Exited: true}, "rows: 3\nmean: 2.5\n", ""), "plot.png", "data/out.csv"), 0},
		{"success_10000_lines", record(Facts{Exited: true}, lines(10000, "line %05d of the output"), "warning: slow\n"), 0},
		{"success_no_output", record(Facts{Exited: true}, "", ""), 0},
		{"success_long_lines_small_cap", record(Facts{Exited: true}, lines(30, strings.Repeat("数据", 40)+" %d"), ""), 1000},
		{"success_500_artifacts", withArtifacts(record(Facts{Exited: true}, "done\n", ""), many...), 0},
		// The classic bash fork bomb in the background of a script that
		// then exits 0: the pids cgroup counted the refused forks.
		{"success_limit_processes", record(Facts{Exited: true, PidsLimitHits: 1843, Pids: 64}, "done\n",
			strings.Repeat("main.sh: fork: retry: Resource temporarily unavailable\n", 40)), 0},
		// The same on gVisor: no count, a probe saw the sandbox full.
		{"success_limit_processes_probed", record(Facts{Exited: true, PidsAtLimit: true, PidsSeen: 82, Pids: 85}, "done\n",
			"main.sh: fork: retry: Resource temporarily unavailable\n"), 0},
		// A program that filled the disk, caught ENOSPC and went on; and
		// one of its children, killed at the memory limit.
		{"success_limit_disk_memory", record(Facts{Exited: true, DiskFull: true, OOMKills: 1},
			"wrote 61 MiB, then: [Errno 28] No space left on device\nworker died: -9\n", ""), 0},
		{"compile_error", record(Facts{Exited: true, ExitCode: 1, CompileFailed: true},
			"", "  File \"/workspace/main.py\", line 1\n    print(\n         ^\nSyntaxError: '(' was never closed\n"), 0},
		{"runtime_error", record(Facts{Exited: true, ExitCode: 1}, "start\n", traceback), 0},
		{"runtime_error_signal", record(Facts{Exited: true, ExitCode: 139, Signal: "SIGSEGV"}, "", ""), 0},
		{"runtime_error_long_stderr", record(Facts{Exited: true, ExitCode: 1},
			"", "Traceback (most recent call last):\n"+lines(6000, "  File \"/workspace/main.py\", line %d, in f")+"RecursionError: maximum recursion depth exceeded\n"), 0},
		{"timeout", record(Facts{TimedOut: true}, "step 1\nstep 2\n", ""), 0},
		{"oom", record(Facts{Exited: true, ExitCode: 137, Signal: "SIGKILL", OOMKills: 1, PeakMemoryMB: 128}, "loading\n", ""), 0},
		{"resource_limit_disk", record(Facts{Exited: true, ExitCode: 1, DiskFull: true}, "",
			"OSError: [Errno 28] No space left on device\n"), 0},
		{"resource_limit_processes", record(Facts{Exited: true, ExitCode: 1, PidsLimitHits: 1, Pids: 256}, "",
			"BlockingIOError: [Errno 11] Resource temporarily unavailable\n"), 0},
		{"internal_error", internal, 0},
		{"input_error", input, 0},
		{"cancelled", record(Facts{Cancelled: true}, "partial\n", ""), 0},
		{"cancelled_queued", queuedCancel, 0},
	}
}

// TestSummaryGolden pins the summary of each verdict; go test -update
// rewrites testdata/summary_*.golden.
func TestSummaryGolden(t *testing.T) {
	// A golden file without a case pins nothing: a renamed or removed case
	// must take its file with it.
	files, err := filepath.Glob(filepath.Join("testdata", "summary_*.golden"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{}
	verdicts := map[sandbox.ErrorType]bool{}
	for _, c := range summaryCases() {
		cases[c.name] = true
		if c.res.Error != nil {
			verdicts[c.res.Error.Type] = true
		} else if c.res.Status == sandbox.StatusSuccess {
			verdicts["success"] = true
		}
	}
	// Every verdict is pinned.
	for _, v := range []sandbox.ErrorType{"success", sandbox.ErrCompile, sandbox.ErrRuntime, sandbox.ErrTimeout, sandbox.ErrOOM,
		sandbox.ErrResourceLimit, sandbox.ErrInternal, sandbox.ErrInput, sandbox.ErrCancelled} {
		if !verdicts[v] {
			t.Errorf("no golden case for %s", v)
		}
	}
	for _, f := range files {
		if name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "summary_"), ".golden"); !cases[name] {
			t.Errorf("%s has no case in summaryCases", f)
		}
	}
	for _, c := range summaryCases() {
		t.Run(c.name, func(t *testing.T) {
			got := Summary(c.res, c.max) + "\n"
			golden := filepath.Join("testdata", "summary_"+c.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("summary changed (-golden +got); if intended, go test -update:\n%s", diff)
			}
		})
	}
}

// TestSummaryRule checks what the golden files pin, so an -update cannot
// silently drop it: docs/api.md's rule for each verdict.
func TestSummaryRule(t *testing.T) {
	for _, c := range summaryCases() {
		s := Summary(c.res, c.max)
		head, _, _ := strings.Cut(s, "\n")
		for _, h := range c.res.LimitsHit {
			if !strings.Contains(s, "\nlimits hit: ") || !strings.Contains(s, string(h.Limit)+" ("+h.Detail+")") {
				t.Errorf("%s: the summary does not name the %s limit hit:\n%s", c.name, h.Limit, s)
			}
		}
		if len(c.res.LimitsHit) == 0 && strings.Contains(s, "limits hit") {
			t.Errorf("%s: limits hit, but none in the record:\n%s", c.name, s)
		}
		switch c.res.Status {
		case sandbox.StatusSuccess:
			if !strings.HasPrefix(head, "success: exit code 0") {
				t.Errorf("%s: headline %q", c.name, head)
			}
			if strings.Contains(s, "next step:") {
				t.Errorf("%s: a success has no next step", c.name)
			}
		default:
			if !strings.Contains(head, string(c.res.Error.Type)) {
				t.Errorf("%s: headline %q lacks the error type", c.name, head)
			}
			if !strings.HasSuffix(s, "next step: "+NextStep(c.res)) {
				t.Errorf("%s: does not end with the next step:\n%s", c.name, s)
			}
			if c.res.ExitCode != nil && !strings.Contains(head, fmt.Sprintf("exit code %d", *c.res.ExitCode)) {
				t.Errorf("%s: headline %q lacks the exit code", c.name, head)
			}
		}
	}
	// Every error type has its own next step.
	seen := map[string]sandbox.ErrorType{}
	for _, typ := range []sandbox.ErrorType{sandbox.ErrCompile, sandbox.ErrRuntime, sandbox.ErrTimeout, sandbox.ErrOOM,
		sandbox.ErrResourceLimit, sandbox.ErrInternal, sandbox.ErrInput, sandbox.ErrCancelled} {
		step := NextStep(sandbox.Result{Error: &sandbox.Failure{Type: typ}, Limits: limits})
		if prev, dup := seen[step]; dup || step == "look at the error above" {
			t.Errorf("%s: next step %q (also %s)", typ, step, prev)
		}
		seen[step] = typ
	}
	for typ, want := range map[sandbox.ErrorType]string{sandbox.ErrCompile: "fix the code and retry", sandbox.ErrOOM: "raise limits.memory_mb (it was 128)",
		sandbox.ErrTimeout: "raise limits.timeout_ms (it was 1000)", sandbox.ErrInternal: "retry: internal error"} {
		if step := NextStep(sandbox.Result{Error: &sandbox.Failure{Type: typ}, Limits: limits}); !strings.Contains(step, want) {
			t.Errorf("%s: next step %q lacks %q", typ, step, want)
		}
	}
}

// TestSummaryTenThousandLines: of a 10,000-line stdout the summary shows
// exactly the first 20 lines and says how many more there were.
func TestSummaryTenThousandLines(t *testing.T) {
	res := record(Facts{Exited: true}, lines(10000, "line %05d of 10000, long enough to overflow the kept head"), "")
	if !res.StdoutTruncated {
		t.Fatal("the stored stdout should be head and tail")
	}
	s := Summary(res, 0)
	for i := range 10000 {
		if in := strings.Contains(s, fmt.Sprintf("line %05d of", i)); in != (i < SummaryLines) {
			t.Errorf("line %d shown: %v", i, in)
		}
	}
	for _, want := range []string{"stdout (first 20 of 10000 lines):", "[… 9980 more lines not shown]"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// TestSummaryCap: whatever the record and the cap, the summary fits, is
// valid UTF-8, keeps its headline and (for failures) the next step, and
// says when it cut something.
func TestSummaryCap(t *testing.T) {
	for _, c := range summaryCases() {
		full := Summary(c.res, 1<<20)
		for _, maxChars := range []int{1, 200, 999, 1000, 1001, 1111, 1500, 2000, 2345, 4000, 10000} {
			s := Summary(c.res, maxChars)
			limit := max(maxChars, MinSummaryChars)
			if n := utf8.RuneCountInString(s); n > limit {
				t.Errorf("%s cap %d: %d characters", c.name, maxChars, n)
			}
			if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
				t.Errorf("%s cap %d: invalid UTF-8 or a broken character", c.name, maxChars)
			}
			head, _, _ := strings.Cut(full, "\n")
			if !strings.HasPrefix(s, head) {
				t.Errorf("%s cap %d: headline lost:\n%s", c.name, maxChars, s)
			}
			if c.res.Status != sandbox.StatusSuccess && !strings.HasSuffix(s, "next step: "+NextStep(c.res)) {
				t.Errorf("%s cap %d: next step lost:\n%s", c.name, maxChars, s)
			}
			if len(c.res.LimitsHit) > 0 && !strings.Contains(s, "\nlimits hit: "+string(c.res.LimitsHit[0].Limit)) {
				t.Errorf("%s cap %d: limits hit lost:\n%s", c.name, maxChars, s)
			}
			if s != full && !strings.Contains(s, "…") {
				t.Errorf("%s cap %d: shortened without saying so:\n%s", c.name, maxChars, s)
			}
		}
	}
}

// TestSummaryNotFinal: only final records have a summary.
func TestSummaryNotFinal(t *testing.T) {
	for _, st := range []sandbox.Status{sandbox.StatusQueued, sandbox.StatusRunning, ""} {
		if s := Summary(sandbox.Result{Status: st, Stdout: "x"}, 0); s != "" {
			t.Errorf("%q: %q", st, s)
		}
	}
}
