package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// TestStoredRequestUnusable: a queued request the node cannot decode, or
// that is no longer valid on this server, fails when claimed instead of
// blocking the queue: Corral's fault as retryable, the request's as an
// input error.
func TestStoredRequestUnusable(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	for id, body := range map[string]string{"garbled": "{", "invalid": `{"language":"cobol","code":"x"}`} {
		ex := &store.Execution{Tenant: "acme", ID: id, RequestHash: "h", Request: []byte(body),
			Record: sandbox.Result{ExecutionID: id, Status: sandbox.StatusQueued, CreatedAt: time.Now().UTC()}}
		if _, _, err := w.store.CreateExecution(t.Context(), ex); err != nil {
			t.Fatal(err)
		}
	}
	a.start(t)
	wantRetryable(t, final(t, a, "acme", "garbled"), "decode stored request")
	rec := final(t, a, "acme", "invalid")
	if rec.Status != sandbox.StatusFailed || rec.Error == nil || rec.Error.Type != sandbox.ErrInput || !strings.Contains(rec.Error.Message, "language") {
		t.Errorf("invalid: %s %+v, want an input error about the language", rec.Status, rec.Error)
	}
	if a.created() != 0 {
		t.Errorf("%d sandboxes made for requests that cannot run", a.created())
	}
}

// TestLiveOutput: output is streamed into the event log up to
// LiveOutputBytes per stream, with a notice where it stops; the record
// keeps all of it.
func TestLiveOutput(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a", func(s *setup) { s.cfg.LiveOutputBytes = 40 << 10 })
	a.start(t)
	code := `import sys
sys.stdout.write("o" * 30000)
sys.stdout.flush()
sys.stderr.write("e" * 5)
sys.stderr.flush()
sys.stdout.write("p" * 30000)
`
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "loud", Language: "python", Code: code})
	rec := final(t, a, "acme", "loud")
	if rec.Status != sandbox.StatusSuccess || rec.StdoutBytes != 60000 || rec.StderrBytes != 5 {
		t.Fatalf("record %s, %d stdout and %d stderr bytes (%s)", rec.Status, rec.StdoutBytes, rec.StderrBytes, rec.Summary)
	}
	evs, err := a.Events(t.Context(), "acme", "loud", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr, notices strings.Builder
	for _, e := range evs {
		switch e.Type {
		case state.EventStdout:
			stdout.Write(e.Data)
		case state.EventStderr:
			stderr.Write(e.Data)
		case state.EventNotice:
			notices.Write(e.Data)
		}
	}
	if want := strings.Repeat("o", 30000) + strings.Repeat("p", 40<<10-30000); stdout.String() != want {
		t.Errorf("live stdout: %d bytes, want the first %d", stdout.Len(), len(want))
	}
	if stderr.String() != "eeeee" {
		t.Errorf("live stderr %q", stderr.String())
	}
	if !strings.Contains(notices.String(), "live stdout stopped after 40960 bytes") {
		t.Errorf("notices %q", notices.String())
	}
}

// TestSweep: the sweeper destroys the sandboxes held past the time their
// holder said it would let go, and only those.
func TestSweep(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	rt := a.fake.Runtimes[runtime.TierContainer]
	var sbs []runtime.Sandbox
	for range 2 {
		sb, err := a.fake.Fleet.Create(t.Context(), runtime.TierContainer, runtime.Spec{}, images.Image{}, fleet.HolderExecution)
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	a.fake.Fleet.Hold(sbs[0], fleet.HolderExecution, time.Now().Add(-time.Second))
	a.fake.Fleet.Hold(sbs[1], fleet.HolderExecution, time.Now().Add(time.Hour))
	a.sweep(t.Context())
	live := rt.Live()
	if len(live) != 1 || live[0].ID() != sbs[1].ID() {
		t.Errorf("live after the sweep: %d, want only the one still within its time", len(live))
	}
	if got := counter(t, a.metrics.SweptSandbox); got != 1 {
		t.Errorf("swept %v, want 1", got)
	}
	a.fake.Fleet.Destroy(sbs[1])
}

// TestEgress: an execution's egress attempts are stored as its audit
// reports them, and listed for its tenant only.
func TestEgress(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "net", Language: "python", Code: "pass"})
	at := time.Now().UTC().Truncate(time.Millisecond)
	a.audit("acme", "net", nil) // nothing to record
	a.audit("acme", "net", []netpolicy.Attempt{
		{Time: at, Method: "CONNECT", Host: "example.com", Port: 443, Allowed: true, Address: "192.0.2.1:443", BytesUp: 10, BytesDown: 20},
		{Time: at, Method: "GET", Host: "evil.test", Port: 80, Reason: "not allowed"},
	})
	got, err := a.Egress(t.Context(), "acme", "net")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Host != "example.com" || !got[0].Allowed || got[0].BytesDown != 20 || !got[0].Time.Equal(at) ||
		got[1].Host != "evil.test" || got[1].Allowed || got[1].Reason != "not allowed" {
		t.Errorf("egress %+v", got)
	}
	if _, err := a.Egress(t.Context(), "other", "net"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's egress: %v", err)
	}
}

// TestWait: a wait that ends before the execution does returns the record
// as it is; the longest wait is the execution's limits and a margin.
func TestWait(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "w1", Language: "python", Code: "pass"})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	rec, err := a.Wait(ctx, "acme", "w1")
	if err != nil || rec.Status != sandbox.StatusQueued {
		t.Errorf("wait on a queued execution: %v, %v; want it queued", rec, err)
	}
	want := 1500*time.Millisecond + a.fake.Config().CompileTimeout + 5*time.Second
	if got := a.WaitDeadline(sandbox.Limits{TimeoutMS: 1500}); got != want {
		t.Errorf("wait deadline %s, want %s", got, want)
	}
}

// TestWaitTakesFinalRecord: a waiter on the node that finishes an
// execution takes its final record as stored, without reading it back
// (reads fail from then on); with a callback it reads the record, which
// then carries the callback's state.
func TestWaitTakesFinalRecord(t *testing.T) {
	for _, callback := range []bool{false, true} {
		t.Run(fmt.Sprint("callback=", callback), func(t *testing.T) {
			w := newWorld(t)
			fs := &flakyStore{Store: w.store}
			a := w.newNode("a", func(s *setup) { s.deps.Store = fs })
			req := sandbox.ExecuteRequest{ExecutionID: "t1", Language: "python", Code: "pass"}
			if callback {
				req.CallbackURL = "https://hooks.test/cb"
			}
			ex := submit(t, a, "acme", req)
			if fs.gets != 0 {
				t.Errorf("a new id was read %d times before its insert, want 0: the insert finds one in use", fs.gets)
			}
			type answer struct {
				rec *sandbox.Result
				err error
			}
			got := make(chan answer, 1)
			go func() {
				rec, err := a.Wait(t.Context(), "acme", "t1")
				got <- answer{rec, err}
			}()
			eventually(t, "the waiter's first look", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				fs.mu.Lock()
				defer fs.mu.Unlock()
				return len(a.waiters[key("acme", "t1")]) == 1 && fs.gets >= 1
			})
			if !callback {
				fs.mu.Lock()
				fs.getFail = errors.New("the waiter read the record again")
				fs.mu.Unlock()
			}
			rec := ex.Record
			rec.Status, rec.Stdout = sandbox.StatusSuccess, "out\n"
			rec.StartedAt, rec.FinishedAt = time.Now().UTC(), time.Now().UTC().Add(time.Nanosecond)
			if err := a.finish(t.Context(), ex, rec, sandbox.StatusQueued); err != nil {
				t.Fatal(err)
			}
			ans := <-got
			if ans.err != nil {
				t.Fatal(ans.err)
			}
			fs.mu.Lock()
			fs.getFail = nil
			fs.mu.Unlock()
			want, err := a.Get(t.Context(), "acme", "t1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, ans.rec); diff != "" {
				t.Errorf("Wait's record (-Get +Wait):\n%s", diff)
			}
			if callback != (ans.rec.Callback != nil) {
				t.Errorf("callback state %+v with a callback %v", ans.rec.Callback, callback)
			}
		})
	}
}
