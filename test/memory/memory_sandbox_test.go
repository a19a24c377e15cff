// Package memory tests the memory-service hand-off through a real corral
// serve: a local HTTP receiver, acting as the memory service, gets a signed
// summary of every execution of a session — including those that finished
// while it refused deliveries, while it was not listening, and while corral
// itself crashed and recovered — by the same delivery mechanism as
// callbacks.
package memory

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	memorySecret = "memory-service-secret-0123456789"
	session      = "memory-session"
)

// entry is the memory delivery's body as docs/api.md describes it, decoded
// here as a memory service would, not with Corral's own type.
type entry struct {
	Tenant      string            `json:"tenant"`
	ExecutionID string            `json:"execution_id"`
	SessionID   string            `json:"session_id"`
	Language    string            `json:"language"`
	Status      sandbox.Status    `json:"status"`
	ErrorType   sandbox.ErrorType `json:"error_type"`
	ExitCode    *int              `json:"exit_code"`
	Summary     string            `json:"summary"`
	Artifacts   []string          `json:"artifacts"`
	CreatedAt   time.Time         `json:"created_at"`
	FinishedAt  time.Time         `json:"finished_at"`
}

// attempt is one POST the receiver saw.
type attempt struct {
	path     string
	header   http.Header
	body     []byte
	accepted bool
	at       time.Time
}

// receiver is the memory service (and a callback receiver on /callback): a
// real HTTP server on a fixed loopback address that can refuse (503), go
// away (nothing listening) and come back.
type receiver struct {
	t    *testing.T
	addr string

	mu       sync.Mutex
	refuse   bool
	srv      *http.Server
	attempts []attempt
	memory   map[string]entry          // by execution id, first accepted
	callback map[string]sandbox.Result // by execution id
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, memory: map[string]entry{}, callback: map[string]sandbox.Result{}}
	r.up()
	t.Cleanup(r.down)
	return r
}

// up starts listening, on the same address as before if there was one.
func (r *receiver) up() {
	r.t.Helper()
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatalf("receiver listen %s: %v", addr, err)
	}
	r.mu.Lock()
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	srv := r.srv
	r.mu.Unlock()
	go srv.Serve(ln)
}

// down stops listening: connections are refused until up.
func (r *receiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

func (r *receiver) setRefuse(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = v
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := attempt{path: req.URL.Path, header: req.Header.Clone(), body: body, at: time.Now()}
	defer func() { r.attempts = append(r.attempts, a) }()
	if r.refuse {
		http.Error(w, "memory service unavailable", http.StatusServiceUnavailable)
		return
	}
	switch req.URL.Path {
	case "/memory":
		// The SDK's verification, with the memory secret.
		if err := sandbox.VerifyCallback([]byte(memorySecret), req.Header.Get(sandbox.HeaderSignature), body, 0); err != nil {
			r.t.Errorf("memory delivery: %v", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var e entry
		if err := json.Unmarshal(body, &e); err != nil {
			r.t.Errorf("memory delivery %q: %v", body, err)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if _, dup := r.memory[e.ExecutionID]; !dup {
			r.memory[e.ExecutionID] = e
		}
	case "/callback":
		var res sandbox.Result
		if err := json.Unmarshal(body, &res); err != nil ||
			sandbox.VerifyCallback([]byte(testserver.AlphaSecret), req.Header.Get(sandbox.HeaderSignature), body, 0) != nil {
			r.t.Errorf("callback %q: bad body or signature", body)
			http.Error(w, "bad callback", http.StatusUnauthorized)
			return
		}
		r.callback[res.ExecutionID] = res
	default:
		http.NotFound(w, req)
		return
	}
	a.accepted = true
	w.WriteHeader(http.StatusNoContent)
}

// received returns a copy of what was accepted.
func (r *receiver) received() map[string]entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]entry, len(r.memory))
	for k, v := range r.memory {
		out[k] = v
	}
	return out
}

// attemptsFor lists the memory POSTs for an execution, in order.
func (r *receiver) attemptsFor(id string) []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []attempt
	for _, a := range r.attempts {
		if a.path == "/memory" && a.header.Get(sandbox.HeaderIdempotent) == id {
			out = append(out, a)
		}
	}
	return out
}

// TestMemoryHandOff runs a session through every phase of the receiver's
// availability and checks that each execution's summary arrives exactly as
// the record has it, signed with the memory secret.
func TestMemoryHandOff(t *testing.T) {
	schema := memorySchema(t)
	rcv := newReceiver(t)
	srv := testserver.Start(t, testserver.Options{Config: fmt.Sprintf(`
[memory]
url = "http://%s/memory"
secret = %q
allow_private = true
`, rcv.addr, memorySecret)})
	client := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute, MaxRetries: 3})
	ctx := t.Context()
	var ids []string
	run := func(name string, req sandbox.ExecuteRequest) *sandbox.Result {
		t.Helper()
		req.SessionID = session
		res, err := client.Execute(ctx, req)
		var sbErr *sandbox.Error
		if err != nil && !errors.As(err, &sbErr) {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Summary == "" {
			t.Errorf("%s: the SDK's result has no summary", name)
		}
		ids = append(ids, res.ExecutionID)
		return res
	}

	// Up: a success with 25 lines and an artifact (and a callback, the
	// other use of the same mechanism), and a compile error.
	ok := run("success", sandbox.ExecuteRequest{Language: "python", CallbackURL: "http://" + rcv.addr + "/callback",
		Code: "import os\nos.makedirs('output', exist_ok=True)\nopen('output/table.csv', 'w').write('a,b\\n')\nfor i in range(25):\n    print('row', i)\n"})
	syntax := run("compile_error", sandbox.ExecuteRequest{Language: "python", Code: "print('unclosed'\n"})

	// Refusing: a runtime error and a timeout finish while every delivery
	// gets a 503.
	rcv.setRefuse(true)
	crash := run("runtime_error", sandbox.ExecuteRequest{Language: "bash", Code: "echo 'about to fail' >&2\nexit 3\n"})
	slow := run("timeout", sandbox.ExecuteRequest{Language: "bash", Code: "sleep 10\n", Limits: sandbox.Limits{TimeoutMS: 1000}})
	waitFor(t, "a refused attempt for each", func() bool {
		return len(rcv.attemptsFor(crash.ExecutionID)) > 0 && len(rcv.attemptsFor(slow.ExecutionID)) > 0
	})

	// Not listening: a success and a cancelled execution.
	rcv.down()
	rcv.setRefuse(false)
	quiet := run("success while down", sandbox.ExecuteRequest{Language: "python", Code: "print(6 * 7)\n"})
	cancelled := cancelRunning(t, client, &ids)

	// Still not listening: corral crashes while an execution runs, and
	// recovery on restart records it as a retryable internal error.
	lost := crashDuring(t, srv, client, &ids)

	// Back: everything arrives, the refused and the unreachable included.
	// First the restarted server must have tried the closed port (its
	// counters start at zero): otherwise nothing unreachable was tested.
	failedMemory := regexp.MustCompile(`(?m)^corral_deliveries_total\{kind="memory",outcome="retry"\} (\S+)$`)
	waitFor(t, "a memory delivery to fail against the closed port", func() bool {
		_, raw := srv.Call("", "GET", "/metrics", nil, nil)
		m := failedMemory.FindSubmatch(raw)
		if m == nil {
			return false
		}
		n, err := strconv.ParseFloat(string(m[1]), 64)
		return err == nil && n >= 1
	})
	backAt := time.Now()
	rcv.up()
	waitFor(t, "a memory delivery of every execution", func() bool { return len(rcv.received()) >= len(ids) })

	// Every execution of the session, and nothing else, was handed off.
	var page struct{ Executions []sandbox.Result }
	srv.Call(testserver.AlphaKey, "GET", "/v1/executions?limit=100&session_id="+session, nil, &page)
	var listed []string
	for _, r := range page.Executions {
		listed = append(listed, r.ExecutionID)
	}
	got := rcv.received()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(listed)
	slices.Sort(keys)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(keys, want) || !slices.Equal(listed, want) {
		t.Fatalf("executions %v, session lists %v, memory got %v", want, listed, keys)
	}

	for _, id := range ids {
		rec, err := client.GetExecution(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		e := got[id]
		for _, a := range rcv.attemptsFor(id) {
			if a.accepted {
				checkSchema(t, schema, a.body)
			}
		}
		var artifacts []string
		for _, a := range rec.Artifacts {
			artifacts = append(artifacts, a.Path)
		}
		errType := sandbox.ErrorType("")
		if rec.Error != nil {
			errType = rec.Error.Type
		}
		if e.Tenant != "alpha" || e.SessionID != session || e.Language != rec.Language || e.Status != rec.Status ||
			e.ErrorType != errType || e.Summary != rec.Summary || rec.Summary == "" || !slices.Equal(e.Artifacts, artifacts) ||
			(e.ExitCode == nil) != (rec.ExitCode == nil) || !e.FinishedAt.Equal(rec.FinishedAt) {
			t.Errorf("%s: memory entry %+v\nrecord: status %s error %v exit %v artifacts %v summary:\n%s", id, e, rec.Status, rec.Error, rec.ExitCode, artifacts, rec.Summary)
		}
		// The same delivery id and idempotency key on every attempt; the
		// tenant's callback secret does not verify it (its own secret signs it).
		as := rcv.attemptsFor(id)
		for _, a := range as {
			if a.header.Get(sandbox.HeaderDeliveryID) != as[0].header.Get(sandbox.HeaderDeliveryID) || a.header.Get(sandbox.HeaderDeliveryID) == "" {
				t.Errorf("%s: delivery ids differ between attempts: %v", id, a.header)
			}
			if sandbox.VerifyCallback([]byte(testserver.AlphaSecret), a.header.Get(sandbox.HeaderSignature), a.body, 0) == nil {
				t.Errorf("%s: the memory delivery verifies with the tenant's callback secret", id)
			}
		}
		// Those that finished while the receiver was away were delivered
		// only after it came back.
		if id != ok.ExecutionID && id != syntax.ExecutionID {
			if !rec.FinishedAt.Before(backAt) {
				t.Errorf("%s finished at %v, after the receiver came back", id, rec.FinishedAt)
			}
			var first time.Time
			for _, a := range as {
				if a.accepted {
					first = a.at
					break
				}
			}
			if first.Before(backAt) {
				t.Errorf("%s: accepted at %v, before the receiver came back at %v", id, first, backAt)
			}
		}
	}
	for _, id := range []string{crash.ExecutionID, slow.ExecutionID} {
		if as := rcv.attemptsFor(id); len(as) < 2 || as[0].accepted {
			t.Errorf("%s: %d attempts, want refused ones then an accepted one", id, len(as))
		}
	}

	// The summaries say what the article asks for, per verdict.
	for _, c := range []struct {
		id   string
		want []string
	}{
		{ok.ExecutionID, []string{"success: exit code 0", "stdout (first 20 of 25 lines):", "row 19\n", "[… 5 more lines not shown]", "artifacts (1): table.csv"}},
		{syntax.ExecutionID, []string{"failed: compile_error", "SyntaxError", "next step: fix the code and retry"}},
		{crash.ExecutionID, []string{"failed: runtime_error, exit code 3", "about to fail", "next step: fix the code and retry"}},
		{slow.ExecutionID, []string{"failed: timeout, no exit code", "next step: make the code faster, or raise limits.timeout_ms (it was 1000)"}},
		{quiet.ExecutionID, []string{"success: exit code 0", "stdout (1 line):\n42\n"}},
		{cancelled, []string{"cancelled: no exit code", "next step: none: a client cancelled it"}},
		{lost, []string{"failed: internal_error, no exit code", "restarted", "next step: retry: internal error"}},
	} {
		if s := got[c.id].Summary; !containsAll(s, c.want) {
			t.Errorf("%s: summary lacks one of %q:\n%s", c.id, c.want, s)
		}
	}
	if strings.Contains(got[ok.ExecutionID].Summary, "row 20\n") {
		t.Errorf("the success summary shows more than 20 lines:\n%s", got[ok.ExecutionID].Summary)
	}
	// The callback carried the same summary.
	waitFor(t, "the callback", func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		_, in := rcv.callback[ok.ExecutionID]
		return in
	})
	rcv.mu.Lock()
	cb := rcv.callback[ok.ExecutionID]
	rcv.mu.Unlock()
	if cb.Summary != got[ok.ExecutionID].Summary {
		t.Errorf("callback summary %q, memory summary %q", cb.Summary, got[ok.ExecutionID].Summary)
	}
}

// memorySchema is the body of the executionSummary webhook in
// api/openapi.yaml.
func memorySchema(t *testing.T) *openapi3.Schema {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(filepath.Join(testenv.ModuleRoot(t), "api", "openapi.yaml"))
	if err != nil {
		t.Fatalf("load spec: %v", err)
	}
	hook := doc.Webhooks["executionSummary"]
	if hook == nil || hook.Post == nil || hook.Post.RequestBody == nil {
		t.Fatal("api/openapi.yaml has no executionSummary webhook with a body")
	}
	mt := hook.Post.RequestBody.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		t.Fatal("the executionSummary webhook has no JSON schema")
	}
	return mt.Schema.Value
}

// checkSchema: body matches the spec, and the spec names every field of it.
func checkSchema(t *testing.T, schema *openapi3.Schema, body []byte) {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("memory body %q: %v", body, err)
		return
	}
	if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("memory body %s does not match the spec: %v", body, err)
	}
	for k := range v {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("memory body field %q is not in the spec", k)
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !f(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitRunning polls until the execution runs.
func waitRunning(t *testing.T, client *sandbox.Client, id string) {
	t.Helper()
	waitFor(t, id+" to run", func() bool {
		r, err := client.GetExecution(t.Context(), id)
		return err == nil && r.Status == sandbox.StatusRunning
	})
}

// startSleeping submits a long execution in the session and waits until
// it runs.
func startSleeping(t *testing.T, client *sandbox.Client, ids *[]string) string {
	t.Helper()
	id, err := client.Submit(t.Context(), sandbox.ExecuteRequest{SessionID: session, Language: "bash", Code: "sleep 30\n",
		Limits: sandbox.Limits{TimeoutMS: 60000}})
	if err != nil {
		t.Fatal(err)
	}
	*ids = append(*ids, id)
	waitRunning(t, client, id)
	return id
}

// cancelRunning starts a long execution in the session and cancels it.
func cancelRunning(t *testing.T, client *sandbox.Client, ids *[]string) string {
	t.Helper()
	id := startSleeping(t, client, ids)
	res, err := client.CancelExecution(t.Context(), id)
	if err != nil || res.Status != sandbox.StatusCancelled {
		t.Fatalf("cancel: %v %+v", err, res)
	}
	return id
}

// crashDuring kills corral (SIGKILL) while an execution of the session runs
// and starts it again on the same data directory and address; recovery
// records the execution as lost.
func crashDuring(t *testing.T, srv *testserver.Server, client *sandbox.Client, ids *[]string) string {
	t.Helper()
	id := startSleeping(t, client, ids)
	srv.Kill()
	srv.Launch()
	waitFor(t, "recovery to record "+id, func() bool {
		r, err := client.GetExecution(t.Context(), id)
		return err == nil && r.Status.Final()
	})
	return id
}
