package interp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes these tests use
// (testenv.FakeEngine): contexts run the host's /usr/bin/python3.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

const hostPython = "/usr/bin/python3"

// unit is a code interpreter over the live sandboxes, with one live python
// sandbox, "box" of tenant "t", on the fake runtime.
type unit struct {
	t   *testing.T
	m   *live.Manager
	h   *handler
	srv *httptest.Server
}

func newUnit(t *testing.T) *unit {
	t.Helper()
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts run it in local mode)")
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	reg := cluster.New(cluster.Config{ID: "node", Address: "127.0.0.1:1", Heartbeat: time.Second, LostAfter: time.Minute}, st, log)
	table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	m := live.New(live.DefaultConfig(), live.Deps{Table: table, Engine: f.Engine, Fleet: f.Fleet, Publisher: reg, Log: log})
	t.Cleanup(m.Close)
	if _, _, err := m.Create(t.Context(), "t", sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python",
		Tier: sandbox.IsolationContainer}); err != nil {
		t.Fatal(err)
	}
	h := &handler{m: m, log: log, keepAlive: defaultKeepAlive, defaults: map[defaultKey]*defaultContext{}}
	routes := h.routes()
	// What the dispatcher does: the sandbox named by a header (here
	// without its access token) goes into the request's context.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
			r = r.WithContext(target.With(r.Context(), target.Target{Tenant: r.Header.Get("Test-Tenant"), SandboxID: id}))
		} else if id := r.URL.Query().Get("sandbox"); id != "" {
			r = r.WithContext(target.With(r.Context(), target.Target{Tenant: "t", SandboxID: id}))
		}
		routes.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &unit{t: t, m: m, h: h, srv: srv}
}

// do sends a request for tenant t's sandbox box.
func (u *unit) do(method, path, body string) *http.Response {
	u.t.Helper()
	return u.doAs("t", "box", method, path, body)
}

func (u *unit) doAs(tenant, id, method, path, body string) *http.Response {
	u.t.Helper()
	req, err := http.NewRequestWithContext(u.t.Context(), method, u.srv.URL+path, strings.NewReader(body))
	if err != nil {
		u.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("Test-Tenant", tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		u.t.Fatal(err)
	}
	u.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// execute runs a cell and returns its stream's lines, checking the
// answer's framing: 200, NDJSON, no blank line, end_of_execution last.
func (u *unit) execute(body string) []map[string]any {
	u.t.Helper()
	resp := u.do("POST", "/execute", body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		u.t.Fatalf("execute %s: %s %s", body, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		u.t.Errorf("Content-Type %q", ct)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			u.t.Fatalf("execute %s: a blank line (the SDK cannot parse it)", body)
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			u.t.Fatalf("execute %s: line %q: %v", body, sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if err := sc.Err(); err != nil {
		u.t.Fatal(err)
	}
	if len(lines) == 0 || lines[len(lines)-1]["type"] != "end_of_execution" {
		u.t.Fatalf("execute %s: lines %v do not end with end_of_execution", body, lines)
	}
	return lines
}

// code is an /execute body running code, with more fields if given.
func code(src string, more ...string) string {
	b, _ := json.Marshal(src)
	return `{"code":` + string(b) + strings.Join(more, "") + `}`
}

func ofType(lines []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["type"] == typ {
			out = append(out, l)
		}
	}
	return out
}

// mainText is what the SDK's Execution.text gives.
func mainText(lines []map[string]any) any {
	for _, l := range ofType(lines, "result") {
		if l["is_main_result"] == true {
			return l["text"]
		}
	}
	return nil
}

// errorBody reads E2B's error body and checks its code is the status.
func errorBody(t *testing.T, resp *http.Response, status int) string {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %s (%s), want %d", resp.Status, b, status)
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Code != status || e.Message == "" {
		t.Fatalf("error body %s: want {code: %d, message}", b, status)
	}
	return e.Message
}

// TestExecute: cells in the default context keep state and stream what
// the SDK reads: stdout, the main result's text, an error with its
// traceback as one string, the execution count.
func TestExecute(t *testing.T) {
	u := newUnit(t)
	u.execute(code("x = 1"))
	lines := u.execute(code("print('hi'); x + 1"))
	if got := mainText(lines); got != "2" {
		t.Errorf("x + 1: main text %v, want 2 (lines %v)", got, lines)
	}
	if out := ofType(lines, "stdout"); len(out) != 1 || out[0]["text"] != "hi\n" {
		t.Errorf("stdout %v, want one hi", out)
	}
	if n := ofType(lines, "number_of_executions"); len(n) != 1 || n[0]["execution_count"] != 2.0 {
		t.Errorf("number_of_executions %v, want 2", n)
	}
	// language python names the same default context.
	if got := mainText(u.execute(code("x + 2", `,"language":"python"`))); got != "3" {
		t.Errorf("x + 2 with language python: %v, want 3", got)
	}

	lines = u.execute(code("def f():\n    return 1/0\nf()"))
	errs := ofType(lines, "error")
	if len(errs) != 1 {
		t.Fatalf("errors %v, want one", lines)
	}
	e := errs[0]
	tb, _ := e["traceback"].(string)
	if e["name"] != "ZeroDivisionError" || e["value"] != "division by zero" ||
		!strings.Contains(tb, "ZeroDivisionError") || !strings.Contains(tb, "return 1/0") {
		t.Errorf("error %v", e)
	}
	if mainText(lines) != nil {
		t.Errorf("a failed cell has a main result: %v", lines)
	}

	lines = u.execute(code("import sys; sys.stderr.write('bad\\n')"))
	if out := ofType(lines, "stderr"); len(out) != 1 || out[0]["text"] != "bad\n" {
		t.Errorf("stderr %v", out)
	}
}

// TestResultFields: a result's MIME bundle goes out as the fields the
// SDK's Result reads, JSON as JSON, other types by their MIME type (the
// SDK's Result.extra).
func TestResultFields(t *testing.T) {
	u := newUnit(t)
	lines := u.execute(code(`
class R:
    def _repr_html_(self): return '<b>x</b>'
    def _repr_markdown_(self): return '**x**'
    def _repr_json_(self): return {'a': [1, 2]}
    def _repr_svg_(self): return '<svg/>'
    def _repr_latex_(self): return '$x$'
    def __repr__(self): return 'R()'
R()`))
	res := ofType(lines, "result")
	if len(res) != 1 {
		t.Fatalf("results %v, want one", lines)
	}
	r := res[0]
	want := map[string]any{"type": "result", "text": "R()", "html": "<b>x</b>", "markdown": "**x**", "svg": "<svg/>",
		"latex": "$x$", "is_main_result": true}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("result[%q] = %v, want %v", k, r[k], v)
		}
	}
	if j, _ := json.Marshal(r["json"]); string(j) != `{"a":[1,2]}` {
		t.Errorf("result json %s, want the object", j)
	}
	for k := range r {
		if _, known := want[k]; !known && k != "json" {
			t.Errorf("result has field %q the SDK would put in extra", k)
		}
	}
}

// TestContexts: contexts made, listed, run by id, restarted (their state
// lost) and deleted; the default context is listed and made again when
// deleted.
func TestContexts(t *testing.T) {
	u := newUnit(t)
	resp := u.do("POST", "/contexts", `{"language":"python"}`)
	var c contextInfo
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create: %s %s", resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.ID == "" || c.Language != "python" || c.Cwd != "/home/user" {
		t.Fatalf("create: %+v, %v", c, err)
	}
	u.execute(code("y = 7", `,"context_id":"`+c.ID+`"`))
	if got := mainText(u.execute(code("y * 6", `,"context_id":"`+c.ID+`"`))); got != "42" {
		t.Errorf("y * 6 = %v, want 42", got)
	}
	// The default context is another.
	if got := ofType(u.execute(code("y")), "error"); len(got) != 1 || got[0]["name"] != "NameError" {
		t.Errorf("y in the default context: %v, want NameError", got)
	}

	var list []contextInfo
	resp = u.do("GET", "/contexts", "")
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list) != 2 {
		t.Fatalf("list: %+v, %v; want the context and the default", list, err)
	}
	var def string
	for _, l := range list {
		if l.ID != c.ID {
			def = l.ID
		}
	}

	if resp := u.do("POST", "/contexts/"+c.ID+"/restart", ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("restart: %s", resp.Status)
	}
	if got := ofType(u.execute(code("y", `,"context_id":"`+c.ID+`"`)), "error"); len(got) != 1 || got[0]["name"] != "NameError" {
		t.Errorf("y after restart: %v, want NameError", got)
	}
	if resp := u.do("DELETE", "/contexts/"+c.ID, ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("delete: %s", resp.Status)
	}
	errorBody(t, u.do("POST", "/execute", code("1", `,"context_id":"`+c.ID+`"`)), http.StatusNotFound)
	errorBody(t, u.do("DELETE", "/contexts/"+c.ID, ""), http.StatusNotFound)
	errorBody(t, u.do("POST", "/contexts/"+c.ID+"/restart", ""), http.StatusNotFound)

	// A deleted default context is made again at the next cell.
	u.execute(code("z = 1"))
	if resp := u.do("DELETE", "/contexts/"+def, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete the default: %s", resp.Status)
	}
	if got := ofType(u.execute(code("z")), "error"); len(got) != 1 || got[0]["name"] != "NameError" {
		t.Errorf("z in a new default context: %v, want NameError", got)
	}
	if got := mainText(u.execute(code("2 + 2"))); got != "4" {
		t.Errorf("2 + 2 = %v", got)
	}
}

// TestDefaultShared: cells arriving together at a sandbox with no
// default context yet share one.
func TestDefaultShared(t *testing.T) {
	u := newUnit(t)
	const n = 4
	done := make(chan string, n)
	for range n {
		go func() {
			// Not u.execute: a test may fail only from its own goroutine.
			resp, err := http.Post(u.srv.URL+"/execute?sandbox=box", "application/json", strings.NewReader(code("import os; os.getpid()")))
			if err != nil {
				done <- "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			done <- string(b)
		}()
	}
	pids := map[any]bool{}
	for range n {
		body := <-done
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("a concurrent cell's answer %q", body)
			}
			lines = append(lines, m)
		}
		pids[mainText(lines)] = true
	}
	var list []contextInfo
	if err := json.NewDecoder(u.do("GET", "/contexts", "").Body).Decode(&list); err != nil || len(list) != 1 {
		t.Fatalf("contexts %+v, %v; want one default", list, err)
	}
	if len(pids) != 1 {
		t.Errorf("the cells ran in processes %v, want one", pids)
	}
}

// TestBadRequests: what the SDK and hostile clients may send gets E2B's
// error body with the status the SDK maps (404 NotFoundError, 502
// TimeoutError, else SandboxError), and loses nothing.
func TestBadRequests(t *testing.T) {
	u := newUnit(t)
	cases := []struct {
		name, method, path, body string
		status                   int
	}{
		{"context and language", "POST", "/execute", code("1", `,"context_id":"c","language":"python"`), 400},
		{"unknown context", "POST", "/execute", code("1", `,"context_id":"nope"`), 404},
		{"unknown language", "POST", "/execute", code("1", `,"language":"cobol"`), 400},
		{"env_vars", "POST", "/execute", code("1", `,"env_vars":{"A":"1"}`), 400},
		{"not JSON", "POST", "/execute", `{"code":`, 400},
		{"code too large", "POST", "/execute", code(strings.Repeat("#", 1<<20+1)), 400},
		{"body too large", "POST", "/execute", `{"code":"` + strings.Repeat("x", httpbody.MaxJSON) + `"}`, 413},
		{"context of no language", "POST", "/contexts", `{"language":"cobol"}`, 400},
		{"context in a relative cwd", "POST", "/contexts", `{"language":"python","cwd":"../etc"}`, 400},
		{"unknown route", "GET", "/execute", "", 404},
		{"delete unknown", "DELETE", "/contexts/nope", "", 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errorBody(t, u.do(c.method, c.path, c.body), c.status)
		})
	}
	// Another tenant's request for the same id (which the dispatcher
	// would refuse first) finds no sandbox.
	errorBody(t, u.doAs("other", "box", "POST", "/execute", code("1")), http.StatusBadGateway)
	errorBody(t, u.doAs("other", "box", "GET", "/contexts", ""), http.StatusBadGateway)
	// A request the dispatcher did not mark is a wiring bug: 500.
	errorBody(t, u.doAs("", "", "POST", "/execute", code("1")), http.StatusInternalServerError)
	// The sandbox still works.
	if got := mainText(u.execute(code("1 + 1"))); got != "2" {
		t.Errorf("after bad requests: %v", got)
	}
	if resp := u.do("GET", "/health", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("health: %s", resp.Status)
	}
}

// TestSandboxGone: a cell for a sandbox that was deleted is answered 502
// (the SDK's TimeoutError), and its default context is forgotten.
func TestSandboxGone(t *testing.T) {
	u := newUnit(t)
	u.execute(code("1"))
	if err := u.m.Kill(t.Context(), "t", "box"); err != nil {
		t.Fatal(err)
	}
	errorBody(t, u.do("POST", "/execute", code("1")), http.StatusBadGateway)
	if _, _, err := u.m.Create(t.Context(), "t", sandbox.CreateSandboxRequest{SandboxID: "box2", Language: "python",
		Tier: sandbox.IsolationContainer}); err != nil {
		t.Fatal(err)
	}
	u.doAs("t", "box2", "POST", "/execute", code("1"))
	u.h.mu.Lock()
	defer u.h.mu.Unlock()
	for k := range u.h.defaults {
		if k.sandbox == "box" {
			t.Errorf("the deleted sandbox's default context is still kept: %v", k)
		}
	}
}

// TestKeepAlive: a silent cell's stream gets keepalive lines, which the
// SDK skips, and still ends with the cell's events.
func TestKeepAlive(t *testing.T) {
	u := newUnit(t)
	u.h.keepAlive = 20 * time.Millisecond
	lines := u.execute(code("import time; time.sleep(0.5); 5"))
	if len(ofType(lines, "keepalive")) == 0 {
		t.Errorf("no keepalive in %v", lines)
	}
	if got := mainText(lines); got != "5" {
		t.Errorf("main text %v, want 5", got)
	}
}

// TestClientLeaves: a client that closes the stream (the SDK's timeout)
// interrupts the cell; the context then runs the next.
func TestClientLeaves(t *testing.T) {
	u := newUnit(t)
	u.execute(code("n = 3"))
	req, _ := http.NewRequest("POST", u.srv.URL+"/execute", bytes.NewReader([]byte(code("import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.05)"))))
	req.Header.Set("E2b-Sandbox-Id", "box")
	req.Header.Set("Test-Tenant", "t")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read until the cell's code runs, then hang up.
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["type"] == "stdout" {
			break
		}
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
	if lines := u.execute(code("n * 2")); mainText(lines) != "6" {
		t.Errorf("after the client left: n * 2 gave %v, want 6", lines)
	}
}
