package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestSDK checks the SDK's promises against one real server.
func TestSDK(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	client := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey, MaxRetries: 2,
		Timeout: time.Minute})
	for _, c := range []struct {
		name string
		f    func(*testing.T, *testserver.Server, *sandbox.Client)
	}{
		{"APIErrors", testAPIErrors},
		{"Idempotent", testIdempotent},
		{"WaitAndCancel", testWaitAndCancel},
		{"ClientTimeout", testClientTimeout},
		{"Stream", testStream},
		{"StreamResumesThroughBrokenProxy", testStreamResumes},
		{"List", testList},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, srv, client) })
	}
}

func testAPIErrors(t *testing.T, srv *testserver.Server, c *sandbox.Client) {
	ctx := t.Context()
	check := func(name string, err error, sentinel error, status int, code, field string) {
		t.Helper()
		var ae *sandbox.APIError
		if !errors.As(err, &ae) || !errors.Is(err, sentinel) || ae.Status != status || ae.Code != code || ae.Field != field {
			t.Errorf("%s: %v (%T)", name, err, err)
			return
		}
		var se *sandbox.Error
		var te *sandbox.TransportError
		if errors.As(err, &se) || errors.As(err, &te) || ae.Message == "" {
			t.Errorf("%s: %+v", name, ae)
		}
	}
	_, err := c.GetExecution(ctx, "no-such-execution")
	check("get unknown", err, sandbox.ErrNotFound, 404, "not_found", "")
	err = c.Cancel(ctx, "no-such-execution")
	check("cancel unknown", err, sandbox.ErrNotFound, 404, "not_found", "")

	_, err = c.Execute(ctx, sandbox.ExecuteRequest{Language: "cobol", Code: "x"})
	check("bad language", err, sandbox.ErrInvalidRequest, 400, "invalid_request", "language")
	_, err = c.Submit(ctx, sandbox.ExecuteRequest{Language: "python", Limits: sandbox.Limits{MemoryMB: 1 << 20}})
	check("memory above max", err, sandbox.ErrInvalidRequest, 400, "invalid_request", "limits.memory_mb")
	_, err = c.Submit(ctx, sandbox.ExecuteRequest{Language: "python", Code: strings.Repeat("#", 11<<20)})
	check("huge body", err, sandbox.ErrPayloadTooLarge, 413, "payload_too_large", "")

	id := sandbox.NewExecutionID()
	if _, err := c.Submit(ctx, sandbox.ExecuteRequest{ExecutionID: id, Language: "bash", Code: "echo a"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(ctx, sandbox.ExecuteRequest{ExecutionID: id, Language: "bash", Code: "echo b"})
	check("same id, other code", err, sandbox.ErrConflict, 409, "conflict", "execution_id")

	bad := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: "wrong", MaxRetries: 3})
	_, err = bad.GetExecution(ctx, id)
	check("wrong key", err, sandbox.ErrUnauthorized, 401, "unauthorized", "")
	// Another tenant's execution does not exist for beta.
	beta := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.BetaKey})
	_, err = beta.GetExecution(ctx, id)
	check("other tenant", err, sandbox.ErrNotFound, 404, "not_found", "")
}

// Executing the same id twice runs it once; generated ids are fresh.
func testIdempotent(t *testing.T, _ *testserver.Server, c *sandbox.Client) {
	ctx := t.Context()
	req := sandbox.ExecuteRequest{ExecutionID: sandbox.NewExecutionID(), Language: "python",
		Code: "import random; print(random.random())"}
	a, err := c.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Execute(ctx, req)
	if err != nil || a.Stdout != b.Stdout || !a.StartedAt.Equal(b.StartedAt) || a.ExecutionID != req.ExecutionID {
		t.Errorf("same id ran twice: %q then %q (%v)", a.Stdout, b.Stdout, err)
	}
	req.ExecutionID = ""
	x, err1 := c.Execute(ctx, req)
	y, err2 := c.Execute(ctx, req)
	if err1 != nil || err2 != nil || x.ExecutionID == y.ExecutionID || !strings.HasPrefix(x.ExecutionID, "ex_") {
		t.Errorf("generated ids %q %q (%v %v)", x.ExecutionID, y.ExecutionID, err1, err2)
	}
}

func testWaitAndCancel(t *testing.T, _ *testserver.Server, c *sandbox.Client) {
	ctx := t.Context()
	id, err := c.Submit(ctx, sandbox.ExecuteRequest{Language: "bash", Code: "echo begun; sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	// Running once the stream says so.
	for ev, err := range c.Stream(ctx, id, sandbox.StreamOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == sandbox.EventStdout {
			break
		}
	}
	if err := c.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, id)
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Type != sandbox.ErrCancelled || res.Status != sandbox.StatusCancelled || res.Stdout != "begun\n" {
		t.Fatalf("after cancel: %+v, %v", res, err)
	}
	// Cancelling again changes nothing and is no error.
	rec, err := c.CancelExecution(ctx, id)
	if err != nil || rec.Status != sandbox.StatusCancelled {
		t.Errorf("second cancel: %+v %v", rec, err)
	}

	// Wait on a successful execution.
	id, err = c.Submit(ctx, sandbox.ExecuteRequest{Language: "bash", Code: "sleep 0.5; echo fine"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = c.Wait(ctx, id)
	if err != nil || res.Stdout != "fine\n" {
		t.Errorf("Wait: %+v %v", res, err)
	}
}

// Config.Timeout bounds Execute; the error names the execution, which goes
// on until cancelled.
func testClientTimeout(t *testing.T, srv *testserver.Server, _ *sandbox.Client) {
	ctx := t.Context()
	impatient := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey, Timeout: 1500 * time.Millisecond})
	id := sandbox.NewExecutionID()
	start := time.Now()
	_, err := impatient.Execute(ctx, sandbox.ExecuteRequest{ExecutionID: id, Language: "bash", Code: "sleep 30"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), id) {
		t.Fatalf("err %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Execute returned after %v", took)
	}
	c := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey})
	rec, err := c.GetExecution(ctx, id)
	if err != nil || rec.Status.Final() {
		t.Fatalf("execution after the client gave up: %+v %v", rec, err)
	}
	if err := c.Cancel(ctx, id); err != nil {
		t.Error(err)
	}
}

func testStream(t *testing.T, _ *testserver.Server, c *sandbox.Client) {
	ctx := t.Context()
	id, err := c.Submit(ctx, sandbox.ExecuteRequest{Language: "python",
		Code: "import sys, time\nfor i in range(4):\n    print('line', i, flush=True)\n    time.sleep(0.1)\nprint('oops', file=sys.stderr)\nsys.exit(2)"})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	var statuses []string
	var done *sandbox.Result
	var last uint64
	for ev, err := range c.Stream(ctx, id, sandbox.StreamOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID <= last {
			t.Errorf("event id %d after %d", ev.ID, last)
		}
		last = ev.ID
		switch ev.Type {
		case sandbox.EventStdout:
			stdout.WriteString(ev.Text)
		case sandbox.EventStderr:
			stderr.WriteString(ev.Text)
		case sandbox.EventStatus:
			statuses = append(statuses, string(ev.Status))
		case sandbox.EventDone:
			done = ev.Result
		}
	}
	if stdout.String() != "line 0\nline 1\nline 2\nline 3\n" || stderr.String() != "oops\n" {
		t.Errorf("streamed %q %q", stdout.String(), stderr.String())
	}
	if strings.Join(statuses, ",") != "queued,running" {
		t.Errorf("statuses %v", statuses)
	}
	if done == nil || done.Status != sandbox.StatusFailed || done.Error == nil || done.Error.Type != sandbox.ErrRuntime ||
		done.ExitCode == nil || *done.ExitCode != 2 {
		t.Errorf("done %+v", done)
	}
	// Resuming after an event gives exactly the rest.
	n := 0
	for ev, err := range c.Stream(ctx, id, sandbox.StreamOptions{After: last - 1}) {
		if err != nil || ev.ID != last || ev.Type != sandbox.EventDone {
			t.Errorf("resumed stream: %+v %v", ev, err)
		}
		n++
	}
	if n != 1 {
		t.Errorf("resumed after %d: %d events", last-1, n)
	}
}

// breakingProxy forwards TCP to target; the first connection is cut after
// limit bytes from the server.
type breakingProxy struct {
	ln    net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup

	mu   sync.Mutex
	open []net.Conn
}

func newBreakingProxy(t *testing.T, target string, limit int64) *breakingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &breakingProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			n := p.conns.Add(1)
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.open = append(p.open, in, out)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() {
				defer p.wg.Done()
				io.Copy(out, in)
				out.Close()
			}()
			go func() {
				defer p.wg.Done()
				if n == 1 {
					io.CopyN(in, out, limit)
				} else {
					io.Copy(in, out)
				}
				in.Close()
				out.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		// Idle keep-alive connections would otherwise hold the copies.
		ln.Close()
		p.mu.Lock()
		for _, c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func testStreamResumes(t *testing.T, srv *testserver.Server, c *sandbox.Client) {
	ctx := t.Context()
	id, err := c.Submit(ctx, sandbox.ExecuteRequest{Language: "python",
		Code: "import time\nfor i in range(10):\n    print('line', i, flush=True)\n    time.sleep(0.2)"})
	if err != nil {
		t.Fatal(err)
	}
	p := newBreakingProxy(t, strings.TrimPrefix(srv.URL, "http://"), 700)
	// No keep-alive: an idle pooled connection would outlive the test.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	via := sandbox.NewClient(sandbox.Config{Endpoint: "http://" + p.ln.Addr().String(), APIKey: testserver.AlphaKey,
		MaxRetries: 2, HTTPClient: hc})
	var stdout strings.Builder
	done := false
	for ev, err := range via.Stream(ctx, id, sandbox.StreamOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		stdout.WriteString(ev.Text)
		done = done || ev.Type == sandbox.EventDone
	}
	var want strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if stdout.String() != want.String() || !done {
		t.Errorf("through a broken connection: %q, done %v", stdout.String(), done)
	}
	if n := p.conns.Load(); n < 2 {
		t.Errorf("%d connections: the stream was never cut and resumed", n)
	}
}

func testList(t *testing.T, _ *testserver.Server, c *sandbox.Client) {
	ctx := t.Context()
	session := fmt.Sprintf("sdk-%d", time.Now().UnixNano())
	run := func(code string) *sandbox.Result {
		res, _ := c.Execute(ctx, sandbox.ExecuteRequest{SessionID: session, Language: "bash", Code: code})
		if res == nil {
			t.Fatalf("%q gave no result", code)
		}
		return res
	}
	run("echo 1")
	slow := run("sleep 0.5")
	bad := run("exit 3")
	page, err := c.List(ctx, sandbox.ListOptions{SessionID: session})
	if err != nil || len(page.Executions) != 3 || page.Executions[0].ExecutionID != bad.ExecutionID {
		t.Fatalf("list: %+v %v", page, err)
	}
	zero := 0
	page, err = c.List(ctx, sandbox.ListOptions{SessionID: session, ExitCodeNe: &zero})
	if err != nil || len(page.Executions) != 1 || page.Executions[0].ExecutionID != bad.ExecutionID {
		t.Errorf("exit_code_ne=0: %+v %v", page, err)
	}
	page, err = c.List(ctx, sandbox.ListOptions{SessionID: session, Sort: "-duration_ms", Limit: 1})
	if err != nil || len(page.Executions) != 1 || page.Executions[0].ExecutionID != slow.ExecutionID || page.NextCursor == "" {
		t.Errorf("slowest: %+v %v", page, err)
	}
	page, err = c.List(ctx, sandbox.ListOptions{SessionID: session, Status: sandbox.StatusFailed, ErrorType: sandbox.ErrRuntime,
		Language: "bash", Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Minute)})
	if err != nil || len(page.Executions) != 1 {
		t.Errorf("filters: %+v %v", page, err)
	}
	n := 0
	for r, err := range c.ListAll(ctx, sandbox.ListOptions{SessionID: session, Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		if r.SessionID != session {
			t.Errorf("other session %q", r.SessionID)
		}
		n++
	}
	if n != 3 {
		t.Errorf("ListAll: %d executions", n)
	}
	_, err = c.List(ctx, sandbox.ListOptions{Sort: "name"})
	var ae *sandbox.APIError
	if !errors.As(err, &ae) || ae.Field != "sort" {
		t.Errorf("bad sort: %v", err)
	}
}

// TestQueueFull: a server with a queue of one answers 429 queue_full with
// Retry-After; the SDK reports it as ErrQueueFull after its retries.
func TestQueueFull(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Extra: []string{"--max-concurrency", "1", "--queue-bound", "1"}})
	c := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey})
	ctx := t.Context()
	var ids []string
	var full error
	for i := 0; i < 10 && full == nil; i++ {
		id, err := c.Submit(ctx, sandbox.ExecuteRequest{Language: "bash", Code: "sleep 5"})
		if err != nil {
			full = err
			break
		}
		ids = append(ids, id)
	}
	var ae *sandbox.APIError
	if !errors.Is(full, sandbox.ErrQueueFull) || !errors.As(full, &ae) || ae.Status != 429 || ae.RetryAfter <= 0 {
		t.Fatalf("flood: %v after %d accepted", full, len(ids))
	}
	// With retries the SDK waits as told and tries again; once capacity
	// frees up the submit goes through.
	patient := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey, MaxRetries: 30})
	for _, id := range ids {
		patient.Cancel(ctx, id)
	}
	if _, err := patient.Submit(ctx, sandbox.ExecuteRequest{Language: "bash", Code: "true"}); err != nil {
		t.Errorf("patient submit: %v", err)
	}
}
