// Package contract runs the HTTP contract of docs/api.md against real corral
// serve processes: once on the embedded backends (SQLite, in-process state)
// and once on PostgreSQL and Redis.
package contract

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

func TestContractEmbedded(t *testing.T)      { runContract(t, embedded) }
func TestContractPostgresRedis(t *testing.T) { runContract(t, shared) }

func runContract(t *testing.T, b backend) {
	s := startServer(t, options{store: b.store(t), state: b.state(t)})
	for _, c := range []struct {
		name string
		f    func(*testing.T, *server)
	}{
		{"Auth", testAuth},
		{"SubmitAndWait", testSubmitAndWait},
		{"SubmitAndPoll", testSubmitAndPoll},
		{"Idempotency", testIdempotency},
		{"Validation", testValidation},
		{"NotFound", testNotFound},
		{"Query", testQuery},
		{"Cancel", testCancel},
		{"Events", testEvents},
		{"Tenants", testTenants},
		{"Callback", testCallback},
		{"Health", testHealth},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			c.f(t, s)
		})
	}
}

func run1(t *testing.T, s *server, key string, req sandbox.ExecuteRequest) sandbox.Result {
	t.Helper()
	var res sandbox.Result
	code, raw := s.call(key, "POST", "/v1/executions?wait=true", req, &res)
	if code != http.StatusOK {
		t.Fatalf("wait submit: %d %s", code, raw)
	}
	return res
}

func wantError(t *testing.T, code int, raw []byte, status int, errCode, field string) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Errorf("status %d body %q is not the JSON error shape", code, raw)
		return
	}
	if code != status || (errCode != "" && e.Error.Code != errCode) || e.Error.Field != field {
		t.Errorf("got %d %+v, want %d code %q field %q", code, e.Error, status, errCode, field)
	}
}

func testAuth(t *testing.T, s *server) {
	for _, key := range []string{"", "wrong-key"} {
		code, raw := s.call(key, "GET", "/v1/executions", nil, nil)
		wantError(t, code, raw, http.StatusUnauthorized, "unauthorized", "")
	}
}

func testSubmitAndWait(t *testing.T, s *server) {
	res := run1(t, s, alphaKey, sandbox.ExecuteRequest{Language: "python", Code: "print(sum(range(100)))"})
	if res.Status != sandbox.StatusSuccess || res.Stdout != "4950\n" || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("record %+v", res)
	}
	if res.ExecutionID == "" || res.Tier != "container" || res.Language != "python" || res.DurationMS <= 0 ||
		res.CreatedAt.IsZero() || res.StartedAt.IsZero() || res.FinishedAt.IsZero() || res.QueueMS < 0 ||
		res.PeakMemoryMB <= 0 || res.StdoutBytes != 5 || res.StdoutLines != 1 || res.Limits.TimeoutMS != 30000 {
		t.Errorf("record fields %+v", res)
	}
	res = run1(t, s, alphaKey, sandbox.ExecuteRequest{Language: "python", Code: "raise SystemExit(3)"})
	if res.Status != sandbox.StatusFailed || res.Error == nil || res.Error.Type != sandbox.ErrRuntime || *res.ExitCode != 3 {
		t.Errorf("runtime error record %+v", res)
	}
}

func poll(t *testing.T, s *server, key, id string) sandbox.Result {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var res sandbox.Result
		code, raw := s.call(key, "GET", "/v1/executions/"+id, nil, &res)
		if code != 200 {
			t.Fatalf("get: %d %s", code, raw)
		}
		if res.Status.Final() {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s still %s", id, res.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testSubmitAndPoll(t *testing.T, s *server) {
	var sub struct {
		ExecutionID string `json:"execution_id"`
		Status      string `json:"status"`
	}
	code, raw := s.call(alphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{Language: "bash", Code: "sleep 0.3; echo done"}, &sub)
	if code != http.StatusAccepted || sub.ExecutionID == "" || sub.Status != "queued" {
		t.Fatalf("async submit: %d %s", code, raw)
	}
	res := poll(t, s, alphaKey, sub.ExecutionID)
	if res.Status != sandbox.StatusSuccess || res.Stdout != "done\n" {
		t.Errorf("record %+v", res)
	}
}

func testIdempotency(t *testing.T, s *server) {
	id := fmt.Sprintf("idem-%d", time.Now().UnixNano())
	req := sandbox.ExecuteRequest{ExecutionID: id, Language: "python", Code: "import random; print(random.random())"}
	first := run1(t, s, alphaKey, req)
	second := run1(t, s, alphaKey, req)
	if first.Stdout != second.Stdout || !first.StartedAt.Equal(second.StartedAt) || first.ExecutionID != id {
		t.Errorf("same id ran twice: %q at %v, then %q at %v", first.Stdout, first.StartedAt, second.Stdout, second.StartedAt)
	}
	// Async resubmission too.
	var sub map[string]any
	if code, raw := s.call(alphaKey, "POST", "/v1/executions", req, &sub); code != http.StatusAccepted || sub["status"] != "success" {
		t.Errorf("async resubmit: %d %s", code, raw)
	}
	// Defaults filled in or spelled out are the same request.
	req.Limits = sandbox.Limits{TimeoutMS: 30000, MemoryMB: 512}
	if code, raw := s.call(alphaKey, "POST", "/v1/executions?wait=true", req, nil); code != http.StatusOK {
		t.Errorf("explicit defaults: %d %s", code, raw)
	}
	req.Code = "print('different')"
	code, raw := s.call(alphaKey, "POST", "/v1/executions", req, nil)
	wantError(t, code, raw, http.StatusConflict, "conflict", "execution_id")
	var list struct{ Executions []sandbox.Result }
	s.call(alphaKey, "GET", "/v1/executions?limit=1000", nil, &list)
	n := 0
	for _, e := range list.Executions {
		if e.ExecutionID == id {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d records for id %s", n, id)
	}
}

func testValidation(t *testing.T, s *server) {
	cases := []struct {
		body   string
		path   string
		status int
		code   string
		field  string
	}{
		{`{"language":"cobol","code":"x"}`, "", 400, "invalid_request", "language"},
		{`{"code":"x"}`, "", 400, "invalid_request", "language"},
		{`{"language":"python","limits":{"memory_mb":999999}}`, "", 400, "invalid_request", "limits.memory_mb"},
		{`{"language":"python","limits":{"timeout_ms":-5}}`, "", 400, "invalid_request", "limits.timeout_ms"},
		{`{"language":"python","limits":{"cpu_cores":64}}`, "", 400, "invalid_request", "limits.cpu_cores"},
		{`{"language":"python","limits":{"disk_mb":1}}`, "", 400, "invalid_request", "limits.disk_mb"},
		{`{"language":"python","limits":{"timeout_ms":"1s"}}`, "", 400, "invalid_request", "limits.timeout_ms"},
		{`{"language":"python","env":{"PATH":"/x"}}`, "", 400, "invalid_request", "env.PATH"},
		{`{"language":"python","isolation":"vm"}`, "", 400, "invalid_request", "isolation"},
		{`{"language":"python","execution_id":"a/b"}`, "", 400, "invalid_request", "execution_id"},
		{`{"language":"python","callback_url":"file:///etc/passwd"}`, "", 400, "invalid_request", "callback_url"},
		{`{"language":"python","colour":"blue"}`, "", 400, "invalid_request", "colour"},
		{`{"language":`, "", 400, "invalid_json", ""},
		{`not json`, "", 400, "invalid_json", ""},
		{``, "", 400, "invalid_json", ""},
		{`{"language":"python"}`, "?wait=maybe", 400, "invalid_request", "wait"},
		{`{"language":"python","code":"` + strings.Repeat("x", 11<<20) + `"}`, "", 413, "payload_too_large", ""},
	}
	for _, c := range cases {
		code, raw := s.call(alphaKey, "POST", "/v1/executions"+c.path, c.body, nil)
		if code >= 500 {
			t.Errorf("%.50s: %d", c.body, code)
		}
		wantError(t, code, raw, c.status, c.code, c.field)
	}
	for _, q := range []struct{ query, field string }{
		{"status=done", "status"}, {"error_type=oops", "error_type"}, {"sort=name", "sort"},
		{"limit=0", "limit"}, {"limit=5000", "limit"}, {"exit_code_ne=x", "exit_code_ne"}, {"since=yesterday", "since"},
		{"cursor=bm90LWEtY3Vyc29y", "cursor"}, {"cursor=%00%ff", "cursor"},
	} {
		code, raw := s.call(alphaKey, "GET", "/v1/executions?"+q.query, nil, nil)
		wantError(t, code, raw, 400, "invalid_request", q.field)
	}
}

func testNotFound(t *testing.T, s *server) {
	for _, p := range []string{"/v1/executions/nope", "/v1/executions/nope/events", "/v1/nothing"} {
		code, raw := s.call(alphaKey, "GET", p, nil, nil)
		wantError(t, code, raw, 404, "not_found", "")
	}
	code, raw := s.call(alphaKey, "POST", "/v1/executions/nope/cancel", nil, nil)
	wantError(t, code, raw, 404, "not_found", "")
}

func testQuery(t *testing.T, s *server) {
	session := fmt.Sprintf("sess-%d", time.Now().UnixNano())
	// A session keeps its sandbox between executions; ending it lets the
	// tests after this one count sandboxes from zero.
	defer func() {
		if code, raw := s.call(alphaKey, "DELETE", "/v1/sessions/"+session, nil, nil); code != 204 && code != 200 {
			t.Errorf("end session: %d %s", code, raw)
		}
	}()
	run := func(lang, code string) sandbox.Result {
		return run1(t, s, alphaKey, sandbox.ExecuteRequest{SessionID: session, Language: lang, Code: code})
	}
	ok := run("python", "print(1)")
	slow := run("python", "import time; time.sleep(0.6)")
	bad := run("python", "raise ValueError('x')")
	syn := run("python", "print(")
	sh := run("bash", "exit 7")
	list := func(query string) []sandbox.Result {
		var l struct {
			Executions []sandbox.Result
			NextCursor string `json:"next_cursor"`
		}
		code, raw := s.call(alphaKey, "GET", "/v1/executions?session_id="+session+"&"+query, nil, &l)
		if code != 200 {
			t.Fatalf("list %s: %d %s", query, code, raw)
		}
		return l.Executions
	}
	ids := func(rs []sandbox.Result) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ExecutionID)
		}
		return out
	}
	if got := list(""); len(got) != 5 || got[0].ExecutionID != sh.ExecutionID {
		t.Errorf("session list (newest first): %v", ids(got))
	}
	if got := list("status=success"); len(got) != 2 {
		t.Errorf("status=success: %v", ids(got))
	}
	if bad.Status != sandbox.StatusFailed || bad.Error == nil || bad.Error.Type != sandbox.ErrRuntime ||
		!strings.Contains(bad.Error.Message, "ValueError: x") {
		t.Errorf("uncaught ValueError: %s %+v", bad.Status, bad.Error)
	}
	// Newest first: bash's exit 7, then python's ValueError.
	if got := ids(list("error_type=runtime_error")); !slices.Equal(got, []string{sh.ExecutionID, bad.ExecutionID}) {
		t.Errorf("runtime errors: %v, want [%s %s]", got, sh.ExecutionID, bad.ExecutionID)
	}
	if got := list("error_type=compile_error"); len(got) != 1 || got[0].ExecutionID != syn.ExecutionID {
		t.Errorf("compile errors: %v", ids(got))
	}
	if got := list("exit_code_ne=0"); len(got) != 3 {
		t.Errorf("exit_code_ne=0: %v", ids(got))
	}
	if got := list("language=bash"); len(got) != 1 || got[0].ExecutionID != sh.ExecutionID {
		t.Errorf("language=bash: %v", ids(got))
	}
	if got := list("sort=-duration_ms"); len(got) != 5 || got[0].ExecutionID != slow.ExecutionID {
		t.Errorf("slowest first: %v", ids(got))
	}
	if got := list("sort=created_at"); len(got) != 5 || got[0].ExecutionID != ok.ExecutionID {
		t.Errorf("oldest first: %v", ids(got))
	}
	// Paging: two at a time, every record once.
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		var l struct {
			Executions []sandbox.Result
			NextCursor string `json:"next_cursor"`
		}
		s.call(alphaKey, "GET", "/v1/executions?session_id="+session+"&limit=2&cursor="+cursor, nil, &l)
		for _, r := range l.Executions {
			if seen[r.ExecutionID] {
				t.Errorf("%s on two pages", r.ExecutionID)
			}
			seen[r.ExecutionID] = true
		}
		if l.NextCursor == "" || pages > 5 {
			break
		}
		cursor = l.NextCursor
	}
	if len(seen) != 5 {
		t.Errorf("paging saw %d of 5", len(seen))
	}
}

func testCancel(t *testing.T, s *server) {
	var sub struct {
		ExecutionID string `json:"execution_id"`
	}
	if code, raw := s.call(alphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{Language: "bash", Code: "echo started; sleep 60"}, &sub); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, raw)
	}
	// Wait until the program runs: it has printed. (A running status and
	// a sandbox directory come before the program starts; a sandbox could
	// also be the server's own, warming a language cache.)
	s.waitOutput(alphaKey, sub.ExecutionID, "started")
	start := time.Now()
	var res sandbox.Result
	code, raw := s.call(alphaKey, "POST", "/v1/executions/"+sub.ExecutionID+"/cancel", nil, &res)
	took := time.Since(start)
	if code != 200 || res.Status != sandbox.StatusCancelled || res.Error == nil || res.Error.Type != sandbox.ErrCancelled {
		t.Fatalf("cancel: %d %s", code, raw)
	}
	if took > time.Second {
		t.Errorf("cancel answered after %v", took)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.sandboxesLeft()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := s.sandboxesLeft(); len(left) > 0 {
		t.Errorf("sandboxes left after cancel: %v", left)
	}
	// Cancelling a finished execution changes nothing.
	var again sandbox.Result
	if code, _ := s.call(alphaKey, "POST", "/v1/executions/"+sub.ExecutionID+"/cancel", nil, &again); code != 200 || again.Status != sandbox.StatusCancelled {
		t.Errorf("second cancel: %d %+v", code, again.Status)
	}
}

func testEvents(t *testing.T, s *server) {
	var sub struct {
		ExecutionID string `json:"execution_id"`
	}
	s.call(alphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{Language: "python",
		Code: "import sys, time\nfor i in range(5):\n    print('line', i, flush=True)\n    time.sleep(0.1)\nprint('oops', file=sys.stderr)"}, &sub)
	evs := s.events(alphaKey, sub.ExecutionID, "")
	var stdout strings.Builder
	var statuses []string
	lastID := 0
	for _, e := range evs {
		var id int
		fmt.Sscan(e.id, &id)
		if id <= lastID {
			t.Errorf("event ids not increasing: %d after %d", id, lastID)
		}
		lastID = id
		switch e.event {
		case "stdout":
			var d struct{ Text string }
			json.Unmarshal([]byte(e.data), &d)
			stdout.WriteString(d.Text)
		case "status":
			var d struct{ Status string }
			json.Unmarshal([]byte(e.data), &d)
			statuses = append(statuses, d.Status)
		}
	}
	if stdout.String() != "line 0\nline 1\nline 2\nline 3\nline 4\n" {
		t.Errorf("streamed stdout %q", stdout.String())
	}
	if len(evs) == 0 || evs[len(evs)-1].event != "done" {
		t.Fatalf("no done event: %+v", evs)
	}
	var rec sandbox.Result
	if err := json.Unmarshal([]byte(evs[len(evs)-1].data), &rec); err != nil || rec.Status != sandbox.StatusSuccess || rec.Stderr != "oops\n" {
		t.Errorf("done event %q", evs[len(evs)-1].data)
	}
	if strings.Join(statuses, ",") != "queued,running" {
		t.Errorf("statuses %v", statuses)
	}
	if len(evs) < 4 {
		t.Fatalf("%d events, too few to resume after the third: %+v", len(evs), evs)
	}
	// Resume after the third event: exactly the rest.
	rest := s.events(alphaKey, sub.ExecutionID, evs[2].id)
	if len(rest) != len(evs)-3 || rest[0].id != evs[3].id {
		t.Errorf("resumed after %s: %d events %+v, want %d from %s", evs[2].id, len(rest), rest, len(evs)-3, evs[3].id)
	}
}

func testTenants(t *testing.T, s *server) {
	id := fmt.Sprintf("tenant-%d", time.Now().UnixNano())
	var sub struct {
		ExecutionID string `json:"execution_id"`
	}
	s.call(alphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{ExecutionID: id, Language: "bash", Code: "sleep 2"}, &sub)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/executions/" + id},
		{"POST", "/v1/executions/" + id + "/cancel"},
		{"GET", "/v1/executions/" + id + "/events"},
	} {
		code, raw := s.call(betaKey, c.method, c.path, nil, nil)
		wantError(t, code, raw, 404, "not_found", "")
	}
	var list struct{ Executions []sandbox.Result }
	s.call(betaKey, "GET", "/v1/executions?limit=1000", nil, &list)
	for _, e := range list.Executions {
		if e.ExecutionID == id {
			t.Errorf("beta lists alpha's execution")
		}
	}
	// The same id is a different execution for beta.
	res := run1(t, s, betaKey, sandbox.ExecuteRequest{ExecutionID: id, Language: "bash", Code: "echo beta"})
	if res.Stdout != "beta\n" {
		t.Errorf("beta's execution %+v", res)
	}
	alpha := poll(t, s, alphaKey, id)
	if alpha.Status != sandbox.StatusSuccess || alpha.Stdout != "" {
		t.Errorf("alpha's execution disturbed: %+v", alpha)
	}
}

// receiver is a real local HTTP server that records callbacks, refusing
// the first refuse attempts.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	refuse   int
	attempts []callback
	got      chan callback
}

type callback struct {
	header http.Header
	body   []byte
	ok     bool
}

func newReceiver(t *testing.T, refuse int) *receiver {
	r := &receiver{refuse: refuse, got: make(chan callback, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		c := callback{header: req.Header.Clone(), body: body, ok: len(r.attempts) >= r.refuse}
		r.attempts = append(r.attempts, c)
		r.mu.Unlock()
		if !c.ok {
			http.Error(w, "not now", http.StatusServiceUnavailable)
			return
		}
		r.got <- c
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) all() []callback {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]callback(nil), r.attempts...)
}

func checkCallback(t *testing.T, c callback, id string) sandbox.Result {
	t.Helper()
	if err := sandbox.VerifyCallback([]byte(alphaSecret), c.header.Get("Corral-Signature"), c.body, 0); err != nil {
		t.Errorf("signature: %v (header %q)", err, c.header.Get("Corral-Signature"))
	}
	if err := sandbox.VerifyCallback([]byte("wrong"), c.header.Get("Corral-Signature"), c.body, 0); err == nil {
		t.Error("signature verifies with the wrong secret")
	}
	if got := c.header.Get("Idempotency-Key"); got != id {
		t.Errorf("Idempotency-Key %q, want %q", got, id)
	}
	if c.header.Get("Corral-Delivery-Id") == "" {
		t.Error("no Corral-Delivery-Id")
	}
	var rec sandbox.Result
	if err := json.Unmarshal(c.body, &rec); err != nil || rec.ExecutionID != id || !rec.Status.Final() {
		t.Errorf("callback body %q", c.body)
	}
	return rec
}

func testCallback(t *testing.T, s *server) {
	r := newReceiver(t, 0)
	var sub struct {
		ExecutionID string `json:"execution_id"`
	}
	s.call(alphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{Language: "python", Code: "print('cb')", CallbackURL: r.URL + "/hook"}, &sub)
	select {
	case c := <-r.got:
		if rec := checkCallback(t, c, sub.ExecutionID); rec.Stdout != "cb\n" {
			t.Errorf("callback record %+v", rec)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no callback")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rec sandbox.Result
		s.call(alphaKey, "GET", "/v1/executions/"+sub.ExecutionID, nil, &rec)
		if rec.Callback != nil && rec.Callback.State == "delivered" && rec.Callback.Attempts == 1 && rec.Callback.LastStatus == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record's callback state %+v", rec.Callback)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testHealth(t *testing.T, s *server) {
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, raw := s.call("", "GET", p, nil, nil); code != 200 {
			t.Errorf("%s: %d %s", p, code, raw)
		}
	}
	code, raw := s.call("", "GET", "/metrics", nil, nil)
	for _, m := range []string{"corral_executions_total{", "corral_execution_duration_seconds_bucket", "corral_queue_wait_seconds",
		"corral_executions_in_flight", "corral_http_requests_total", "corral_deliveries_total", "corral_orphans_total"} {
		if !strings.Contains(string(raw), m) {
			t.Errorf("metrics lack %s", m)
		}
	}
	if code != 200 {
		t.Errorf("metrics: %d", code)
	}
}

// TestCallbackSurvivesRestart: the receiver refuses the first attempts and
// corral restarts after the first; the callback still arrives, signed, with the
// same Idempotency-Key and delivery id on every attempt.
func TestCallbackSurvivesRestart(t *testing.T) {
	s := startServer(t, options{})
	r := newReceiver(t, 3)
	var sub struct {
		ExecutionID string `json:"execution_id"`
	}
	s.call(alphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{Language: "bash", Code: "echo hi", CallbackURL: r.URL}, &sub)
	// Restart once the first attempt is recorded, not as soon as the
	// receiver sees it: a send cut off by the shutdown before its answer
	// is read is no attempt (internal/notify), the receiver would count
	// one the record does not, and the delivery would wait out its
	// 1-minute lease.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var rec sandbox.Result
		s.call(alphaKey, "GET", "/v1/executions/"+sub.ExecutionID, nil, &rec)
		if rec.Callback != nil && rec.Callback.Attempts >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no first attempt recorded; the receiver saw %d", len(r.all()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Restart()
	var c callback
	select {
	case c = <-r.got:
	case <-time.After(90 * time.Second):
		t.Fatalf("callback never arrived; %d attempts", len(r.all()))
	}
	checkCallback(t, c, sub.ExecutionID)
	attempts := r.all()
	if len(attempts) < 4 {
		t.Errorf("%d attempts, want the 3 refused and 1 accepted", len(attempts))
	}
	for _, a := range attempts {
		if a.header.Get("Idempotency-Key") != sub.ExecutionID || a.header.Get("Corral-Delivery-Id") != attempts[0].header.Get("Corral-Delivery-Id") {
			t.Errorf("attempt headers differ: %v", a.header)
		}
	}
	// The receiver has answered; the notifier stores the outcome just after.
	var rec sandbox.Result
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec = sandbox.Result{}
		s.call(alphaKey, "GET", "/v1/executions/"+sub.ExecutionID, nil, &rec)
		if rec.Callback != nil && rec.Callback.State == "delivered" || time.Now().After(deadline) {
			break
		}
	}
	if rec.Callback == nil || rec.Callback.State != "delivered" || rec.Callback.Attempts < 4 {
		t.Errorf("record's callback %+v", rec.Callback)
	}
}

// TestOrphanedNode: two nodes share PostgreSQL and Redis; the node running
// a 60 s execution is killed with SIGKILL; the other marks it a retryable
// internal_error within 35 s, and nothing stays running.
func TestOrphanedNode(t *testing.T) {
	storeURL, stateURL := testenv.Postgres(t), testenv.Redis(t)
	a := startServer(t, options{store: storeURL, state: stateURL, extra: []string{"--node-id", "node-a"}})
	var sub struct {
		ExecutionID string `json:"execution_id"`
	}
	a.call(alphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{Language: "bash", Code: "sleep 60", Limits: sandbox.Limits{TimeoutMS: 90000}}, &sub)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var r sandbox.Result
		a.call(alphaKey, "GET", "/v1/executions/"+sub.ExecutionID, nil, &r)
		if r.Status == sandbox.StatusRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ran: %+v", r)
		}
	}
	b := startServer(t, options{store: storeURL, state: stateURL, extra: []string{"--node-id", "node-b"}})
	// What node A's process has when it dies: the reap after its restart
	// must remove these. (The new process may start sandboxes of its own,
	// such as one warming a language cache.)
	orphaned := a.sandboxesLeft()
	if len(orphaned) == 0 {
		t.Fatal("node A runs an execution but has no sandbox directory")
	}
	a.Kill()
	killed := time.Now()
	var rec sandbox.Result
	for {
		b.call(alphaKey, "GET", "/v1/executions/"+sub.ExecutionID, nil, &rec)
		if rec.Status.Final() || time.Since(killed) > 40*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(killed)
	if rec.Status != sandbox.StatusFailed || rec.Error == nil || rec.Error.Type != sandbox.ErrInternal || !rec.Error.Retryable ||
		!strings.Contains(rec.Error.Message, "node-a") {
		t.Fatalf("after %v: %s %+v", took, rec.Status, rec.Error)
	}
	if took > 35*time.Second {
		t.Errorf("marked lost %v after the kill", took)
	}
	t.Logf("orphan marked %v after the kill: %s", took.Round(100*time.Millisecond), rec.Error.Message)
	var running struct{ Executions []sandbox.Result }
	if code, raw := b.call(alphaKey, "GET", "/v1/executions?status=running", nil, &running); code != http.StatusOK {
		t.Fatalf("list running: %d %s", code, raw)
	}
	if len(running.Executions) != 0 {
		t.Errorf("still running: %d", len(running.Executions))
	}
	// Node A comes back: it reaps the sandbox its previous process left.
	a.Launch()
	for _, left := range a.sandboxesLeft() {
		if slices.Contains(orphaned, left) {
			t.Errorf("after restart node A still has %s", left)
		}
	}
}

// TestThousandExecutions: 1,000 bash executions from 32 concurrent clients
// all reach a final state, the store holds exactly 1,000 records and no
// answer is a 5xx; with the queue bound above the client count no 429
// appears. Then, with a small bound, an asynchronous flood gets 429s
// (queue_full, Retry-After) and nothing else.
func TestThousandExecutions(t *testing.T) {
	s := startServer(t, options{})
	const total, clients = 1000, 32
	var mu sync.Mutex
	codes := map[int]int{}
	statuses := map[sandbox.Status]int{}
	var wg sync.WaitGroup
	work := make(chan int)
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				var res sandbox.Result
				code, _ := s.call(alphaKey, "POST", "/v1/executions?wait=true",
					sandbox.ExecuteRequest{ExecutionID: fmt.Sprintf("load-%04d", i), Language: "bash", Code: fmt.Sprintf("echo %d", i)}, &res)
				mu.Lock()
				codes[code]++
				statuses[res.Status]++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < total; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d executions in %v (%.1f/s): codes %v statuses %v", total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), codes, statuses)
	if codes[200] != total || statuses[sandbox.StatusSuccess] != total {
		t.Errorf("codes %v statuses %v", codes, statuses)
	}
	n := 0
	cursor := ""
	for {
		var l struct {
			Executions []sandbox.Result
			NextCursor string `json:"next_cursor"`
		}
		s.call(alphaKey, "GET", "/v1/executions?limit=1000&cursor="+cursor, nil, &l)
		for _, e := range l.Executions {
			if strings.HasPrefix(e.ExecutionID, "load-") {
				n++
				if !e.Status.Final() {
					t.Errorf("%s is %s", e.ExecutionID, e.Status)
				}
			}
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	if n != total {
		t.Errorf("store holds %d records, want %d", n, total)
	}

	// A small queue: the flood is refused with 429 beyond it.
	small := startServer(t, options{extra: []string{"--max-concurrency", "2", "--queue-bound", "4"}})
	accepted, refused := map[string]bool{}, 0
	for i := 0; i < 40; i++ {
		req, _ := json.Marshal(sandbox.ExecuteRequest{Language: "bash", Code: "sleep 0.2"})
		hreq, _ := http.NewRequest("POST", small.URL+"/v1/executions", strings.NewReader(string(req)))
		hreq.Header.Set("Authorization", "Bearer "+alphaKey)
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusAccepted:
			var sub struct {
				ExecutionID string `json:"execution_id"`
			}
			json.Unmarshal(raw, &sub)
			accepted[sub.ExecutionID] = true
		case http.StatusTooManyRequests:
			refused++
			var e apiError
			json.Unmarshal(raw, &e)
			if e.Error.Code != "queue_full" || resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 without queue_full/Retry-After: %s %v", raw, resp.Header)
			}
		default:
			t.Errorf("flood answer %d %s", resp.StatusCode, raw)
		}
	}
	if refused == 0 {
		t.Error("no 429 with a queue bound of 4 and 40 instant submissions")
	}
	// At most bound queued + concurrency running at any moment were
	// accepted beyond what had finished; all accepted ones finish.
	for id := range accepted {
		if r := poll(t, small, alphaKey, id); r.Status != sandbox.StatusSuccess {
			t.Errorf("%s: %s", id, r.Status)
		}
	}
	t.Logf("flood: %d accepted, %d refused with 429", len(accepted), refused)
}
