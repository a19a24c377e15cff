package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes the unit tests use
// (testenv.FakeEngine); engine_sandbox_test.go runs real ones as root.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

// TestValidation refuses bad requests with the field named.
func TestValidation(t *testing.T) {
	e := testenv.FakeEngine(t)
	max := e.Config().Max
	cases := []struct {
		req   sandbox.ExecuteRequest
		field string
	}{
		{sandbox.ExecuteRequest{Code: "x"}, "language"},
		{sandbox.ExecuteRequest{Language: "cobol", Code: "x"}, "language"},
		{sandbox.ExecuteRequest{Language: "python", Limits: sandbox.Limits{TimeoutMS: max.TimeoutMS + 1}}, "limits.timeout_ms"},
		{sandbox.ExecuteRequest{Language: "python", Limits: sandbox.Limits{MemoryMB: max.MemoryMB + 1}}, "limits.memory_mb"},
		{sandbox.ExecuteRequest{Language: "python", Limits: sandbox.Limits{MemoryMB: 1}}, "limits.memory_mb"},
		{sandbox.ExecuteRequest{Language: "python", Limits: sandbox.Limits{CPUCores: max.CPUCores + 1}}, "limits.cpu_cores"},
		{sandbox.ExecuteRequest{Language: "python", Limits: sandbox.Limits{DiskMB: max.DiskMB + 1}}, "limits.disk_mb"},
		{sandbox.ExecuteRequest{Language: "python", Limits: sandbox.Limits{TimeoutMS: -1}}, "limits.timeout_ms"},
		{sandbox.ExecuteRequest{Language: "python", Env: map[string]string{"PATH": "/evil"}}, "env.PATH"},
		{sandbox.ExecuteRequest{Language: "python", Env: map[string]string{"CORRAL_X": "1"}}, "env.CORRAL_X"},
		{sandbox.ExecuteRequest{Language: "python", Env: map[string]string{"A=B": "1"}}, "env"},
		{sandbox.ExecuteRequest{Language: "python", Env: map[string]string{"A": "x\x00y"}}, "env.A"},
		{sandbox.ExecuteRequest{Language: "python", Isolation: "vm"}, "isolation"},
		{sandbox.ExecuteRequest{Language: "python", Tier: "vm"}, "tier"},
		{sandbox.ExecuteRequest{Language: "python", Tier: sandbox.TierContainer, Isolation: sandbox.TierGVisor}, "isolation"},
		{sandbox.ExecuteRequest{Language: "python", Image: "nope"}, "image"},
		{sandbox.ExecuteRequest{Language: "python", ExecutionID: "../x"}, "execution_id"},
		{sandbox.ExecuteRequest{Language: "python", SessionID: strings.Repeat("s", 200)}, "session_id"},
		{sandbox.ExecuteRequest{Language: "python", Code: strings.Repeat("#", 2<<20)}, "code"},
		{sandbox.ExecuteRequest{Language: "python", Code: "\xff"}, "code"},
	}
	for _, c := range cases {
		_, err := e.Prepare(c.req)
		ie, ok := err.(*validate.InputError)
		if !ok {
			t.Errorf("%+v: err = %v, want an InputError", c.req.Limits, err)
			continue
		}
		if ie.Field != c.field {
			t.Errorf("field = %q, want %q (%v)", ie.Field, c.field, ie)
		}
	}
	// isolation is tier's old name, accepted for a release: read as tier.
	for _, req := range []sandbox.ExecuteRequest{
		{Language: "python", Isolation: sandbox.TierContainer},
		{Language: "python", Tier: sandbox.TierContainer, Isolation: sandbox.TierContainer},
	} {
		job, err := e.Prepare(req)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		if job.Req.Tier != sandbox.TierContainer || job.Req.Isolation != "" || job.Tier != runtime.TierContainer {
			t.Errorf("%+v: tier %q, isolation %q, routed to %s", req, job.Req.Tier, job.Req.Isolation, job.Tier)
		}
	}
	job, err := e.Prepare(sandbox.ExecuteRequest{Language: "Python3"})
	if err != nil {
		t.Fatal(err)
	}
	d := e.Config().Default
	if job.Req.Language != "python" || job.Req.Limits != d || job.Req.ExecutionID == "" {
		t.Errorf("normalized request %+v", job.Req)
	}
}

// TestRunVerdicts runs programs to each verdict the fake runtime can give
// (it limits nothing: no OOM, fork bomb or full disk), in python and bash.
func TestRunVerdicts(t *testing.T) {
	f := testenv.FakeEngine(t)
	cases := []struct {
		name, lang, code string
		timeoutMS        int64
		status           sandbox.Status
		errType          sandbox.ErrorType
		stdout           string
		exit             int // when it exited
	}{
		{"python hello", "python", "print(sum(range(100)))", 0, sandbox.StatusSuccess, "", "4950\n", 0},
		{"python raise", "python", "print('before')\nraise ValueError('boom')", 0, sandbox.StatusFailed, sandbox.ErrRuntime, "before\n", 1},
		{"python syntax", "python", "print(\n", 0, sandbox.StatusFailed, sandbox.ErrCompile, "", 1},
		{"bash exit", "bash", "echo failing >&2; exit 3", 0, sandbox.StatusFailed, sandbox.ErrRuntime, "", 3},
		{"bash syntax", "bash", "if then fi (", 0, sandbox.StatusFailed, sandbox.ErrCompile, "", 2},
		{"bash timeout", "bash", "echo started; sleep 30", 300, sandbox.StatusFailed, sandbox.ErrTimeout, "started\n", -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			job, err := f.Prepare(sandbox.ExecuteRequest{Language: c.lang, Code: c.code, Tier: sandbox.TierContainer,
				Limits: sandbox.Limits{TimeoutMS: c.timeoutMS}})
			if err != nil {
				t.Fatal(err)
			}
			res := f.Run(t.Context(), job, nil)
			var got sandbox.ErrorType
			if res.Error != nil {
				got = res.Error.Type
			}
			if res.Status != c.status || got != c.errType || res.Stdout != c.stdout {
				t.Errorf("%s %q, stdout %q; want %s %q, %q\n%s", res.Status, got, res.Stdout, c.status, c.errType, c.stdout, res.Summary)
			}
			switch {
			case c.exit < 0 && res.ExitCode != nil:
				t.Errorf("exit code %d after a timeout, want none", *res.ExitCode)
			case c.exit >= 0 && (res.ExitCode == nil || *res.ExitCode != c.exit):
				t.Errorf("exit code %v, want %d", res.ExitCode, c.exit)
			}
			if res.Tier != "container" || res.TierReason != "requested" || res.ExecutionID != job.Req.ExecutionID || res.Summary == "" {
				t.Errorf("record: tier %s (%q), id %q, summary %q", res.Tier, res.TierReason, res.ExecutionID, res.Summary)
			}
		})
	}
	if !testenv.Eventually(t, 10*time.Second, func() bool { return f.AliveCount() == 0 }) {
		t.Errorf("%d sandboxes left after the runs", f.AliveCount())
	}
}

// TestRunEnvironment: a program starts from the fixed environment, the
// request's variables merged in, sorted.
func TestRunEnvironment(t *testing.T) {
	f := testenv.FakeEngine(t)
	code := `import os
print(os.environ['TZ'], os.environ['LANG'], os.environ['PYTHONHASHSEED'], os.environ['USER'], os.environ.get('GREETING'))
keys = list(os.environ)
print(keys == sorted(keys))`
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "python", Code: code, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Run(t.Context(), job, nil); res.Stdout != "UTC C.UTF-8 0 sandbox hi\nTrue\n" {
		t.Errorf("stdout %q (%s)", res.Stdout, res.Summary)
	}
}

// TestRunCancelled: cancelling a running execution ends it as cancelled,
// with the output it had printed.
func TestRunCancelled(t *testing.T) {
	f := testenv.FakeEngine(t)
	res, _ := runCancelled(t, f.Engine, sandbox.TierAuto)
	if res.Stdout != "started\n" {
		t.Errorf("stdout %q, want what it printed", res.Stdout)
	}
}

// runCancelled runs a program on tier that prints and sleeps, cancels it
// once it printed, checks its record says cancelled and returns it, with
// how long the cancel took to answer.
func runCancelled(t *testing.T, e *engine.Engine, tier sandbox.Tier) (sandbox.Result, time.Duration) {
	t.Helper()
	job, err := e.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: "echo started; sleep 60", Tier: tier})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sink := &startSink{started: make(chan struct{})}
	done := make(chan sandbox.Result)
	go func() { done <- e.Run(ctx, job, sink) }()
	select {
	case <-sink.started:
	case res := <-done:
		t.Fatalf("finished before it printed: %s %+v", res.Status, res.Error)
	}
	at := time.Now()
	cancel()
	res := <-done
	took := time.Since(at)
	if res.Status != sandbox.StatusCancelled || res.Error == nil || res.Error.Type != sandbox.ErrCancelled {
		t.Errorf("result %s %+v, want cancelled", res.Status, res.Error)
	}
	return res, took
}

// TestRunStopping: a node that is stopping refuses the execution's first
// process (StartObserver): nothing runs, and the record says cancelled.
func TestRunStopping(t *testing.T) {
	f := testenv.FakeEngine(t)
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: "echo ran"})
	if err != nil {
		t.Fatal(err)
	}
	res := f.Run(t.Context(), job, refusingSink{})
	if res.Status != sandbox.StatusCancelled || res.Stdout != "" {
		t.Errorf("result %s %+v, stdout %q; want cancelled, nothing run", res.Status, res.Error, res.Stdout)
	}
}

type refusingSink struct{}

func (refusingSink) Stdout([]byte)  {}
func (refusingSink) Stderr([]byte)  {}
func (refusingSink) Starting() bool { return false }

// startSink says when the program printed first.
type startSink struct {
	once    sync.Once
	started chan struct{}
}

func (s *startSink) Stdout(p []byte) { s.once.Do(func() { close(s.started) }) }
func (s *startSink) Stderr(p []byte) {}
