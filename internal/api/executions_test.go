package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

func bash(code string) sandbox.ExecuteRequest {
	return sandbox.ExecuteRequest{Language: "bash", Code: code}
}

// TestSubmitWait: ?wait=true answers the final record at once; it is the
// record GET and the list answer after, and only for its tenant.
func TestSubmitWait(t *testing.T) {
	s := newStack(t)
	var res sandbox.Result
	s.call(keyAlpha, "POST", "/v1/executions?wait=true", jsonOf(t, bash("echo hello; echo oops >&2; exit 3")), http.StatusOK, &res)
	if res.Status != sandbox.StatusFailed || res.ExitCode == nil || *res.ExitCode != 3 || res.Stdout != "hello\n" ||
		res.Stderr != "oops\n" || res.Language != "bash" || res.ExecutionID == "" {
		t.Fatalf("record %+v", res)
	}
	var got sandbox.Result
	s.call(keyAlpha, "GET", "/v1/executions/"+res.ExecutionID, "", http.StatusOK, &got)
	if got.ExecutionID != res.ExecutionID || got.Stdout != res.Stdout || got.Status != res.Status {
		t.Errorf("GET answered %+v; the wait answered %+v", got, res)
	}
	var l listed
	s.call(keyAlpha, "GET", "/v1/executions", "", http.StatusOK, &l)
	if len(l.Executions) != 1 || l.Executions[0].ExecutionID != res.ExecutionID {
		t.Errorf("alpha's list: %+v", l)
	}

	// Another tenant's execution is not found, whatever the call.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/executions/" + res.ExecutionID},
		{"POST", "/v1/executions/" + res.ExecutionID + "/cancel"},
		{"GET", "/v1/executions/" + res.ExecutionID + "/events"},
		{"GET", "/v1/executions/" + res.ExecutionID + "/egress"},
	} {
		s.fail(keyBeta, c.method, c.path, "", http.StatusNotFound, "not_found")
	}
	s.call(keyBeta, "GET", "/v1/executions", "", http.StatusOK, &l)
	if len(l.Executions) != 0 {
		t.Errorf("beta lists alpha's executions: %+v", l)
	}
	// An id that cannot be one is not found either.
	for _, path := range []string{"/v1/executions/" + url.PathEscape("no spaces"), "/v1/executions/" + strings.Repeat("x", 200)} {
		s.fail(keyAlpha, "GET", path, "", http.StatusNotFound, "not_found")
		s.fail(keyAlpha, "POST", path+"/cancel", "", http.StatusNotFound, "not_found")
		s.fail(keyAlpha, "GET", path+"/events", "", http.StatusNotFound, "not_found")
		s.fail(keyAlpha, "GET", path+"/egress", "", http.StatusNotFound, "not_found")
	}

	var eg egressList
	s.call(keyAlpha, "GET", "/v1/executions/"+res.ExecutionID+"/egress", "", http.StatusOK, &eg)
	if eg.Attempts == nil || len(eg.Attempts) != 0 {
		t.Errorf("egress of a program without network: %s", jsonOf(t, eg))
	}
}

// TestSubmitAsync: without wait the answer is 202 queued; the record is
// final later. The same execution_id with the same request is the same
// execution; with another request it is a conflict.
func TestSubmitAsync(t *testing.T) {
	s := newStack(t)
	req := bash("echo async")
	req.ExecutionID = "job-1"
	id := s.submit(keyAlpha, req)
	if id != "job-1" {
		t.Fatalf("submitted as %q", id)
	}
	if res := s.final(keyAlpha, id); res.Status != sandbox.StatusSuccess || res.Stdout != "async\n" {
		t.Fatalf("record %+v", res)
	}
	// Resent once final: the record, at once.
	var again sandbox.Result
	s.call(keyAlpha, "POST", "/v1/executions?wait=1", jsonOf(t, req), http.StatusOK, &again)
	if again.ExecutionID != id || again.Stdout != "async\n" {
		t.Errorf("resent: %+v", again)
	}
	var sub submitted
	s.call(keyAlpha, "POST", "/v1/executions", jsonOf(t, req), http.StatusAccepted, &sub)
	if sub.ExecutionID != id || sub.Status != sandbox.StatusSuccess {
		t.Errorf("resent without wait: %+v", sub)
	}
	other := bash("echo something else")
	other.ExecutionID = "job-1"
	e, _ := s.fail(keyAlpha, "POST", "/v1/executions", jsonOf(t, other), http.StatusConflict, "conflict")
	if e.Field != "execution_id" {
		t.Errorf("conflict names %q", e.Field)
	}
	// Ids are the tenant's own: beta may use the same one.
	if id := s.submit(keyBeta, other); id != "job-1" {
		t.Errorf("beta's job-1 submitted as %q", id)
	}
	s.fail(keyAlpha, "POST", "/v1/executions?wait=maybe", jsonOf(t, bash("true")), http.StatusBadRequest, "invalid_request")
}

// TestCancel: a running execution is cancelled; cancelling a final one
// answers its record.
func TestCancel(t *testing.T) {
	s := newStack(t)
	id := s.submit(keyAlpha, bash("echo started; sleep 600"))
	until(t, id+" runs", func() bool {
		var res sandbox.Result
		s.call(keyAlpha, "GET", "/v1/executions/"+id, "", http.StatusOK, &res)
		return res.Status == sandbox.StatusRunning
	})
	var res sandbox.Result
	s.call(keyAlpha, "POST", "/v1/executions/"+id+"/cancel", "", http.StatusOK, &res)
	if res = s.final(keyAlpha, id); res.Status != sandbox.StatusCancelled || res.Error == nil || res.Error.Type != sandbox.ErrCancelled {
		t.Fatalf("cancelled: %+v", res)
	}
	var again sandbox.Result
	s.call(keyAlpha, "POST", "/v1/executions/"+id+"/cancel", "", http.StatusOK, &again)
	if again.Status != sandbox.StatusCancelled {
		t.Errorf("cancel of a cancelled execution: %+v", again)
	}
	s.fail(keyAlpha, "POST", "/v1/executions/nope/cancel", "", http.StatusNotFound, "not_found")
}

// TestExecutionEvents: the stream carries the output and the status, ends
// with the done event whose data is the final record; with Last-Event-ID
// (or ?last_event_id) it starts after that event.
func TestExecutionEvents(t *testing.T) {
	s := newStack(t)
	var res sandbox.Result
	s.call(keyAlpha, "POST", "/v1/executions?wait=true", jsonOf(t, bash("echo one; echo two >&2")), http.StatusOK, &res)
	r := s.call(keyAlpha, "GET", "/v1/executions/"+res.ExecutionID+"/events", "", http.StatusOK, nil)
	if ct := r.header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	all := events(t, r.body)
	if len(all) < 3 {
		t.Fatalf("events %+v", all)
	}
	var out, errOut string
	for i, ev := range all {
		if i > 0 && ev.id <= all[i-1].id {
			t.Errorf("event ids not increasing: %+v", all)
		}
		var d map[string]string
		switch ev.typ {
		case "stdout", "stderr":
			if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
				t.Fatalf("%s data %q: %v", ev.typ, ev.data, err)
			}
			if ev.typ == "stdout" {
				out += d["text"]
			} else {
				errOut += d["text"]
			}
		case "status":
			if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d["status"] == "" {
				t.Errorf("status data %q", ev.data)
			}
		}
	}
	last := all[len(all)-1]
	var done sandbox.Result
	if last.typ != "done" || json.Unmarshal([]byte(last.data), &done) != nil || done.ExecutionID != res.ExecutionID || done.Status != res.Status {
		t.Fatalf("the stream ends with %+v", last)
	}
	if out != "one\n" || errOut != "two\n" {
		t.Errorf("streamed stdout %q, stderr %q", out, errOut)
	}

	// Resumed after the first event: the rest, the same.
	for _, how := range [][]string{
		{"/events", "Last-Event-ID", fmt.Sprint(all[0].id)},
		{fmt.Sprintf("/events?last_event_id=%d", all[0].id)},
	} {
		hdr := how[1:]
		r = s.call(keyAlpha, "GET", "/v1/executions/"+res.ExecutionID+how[0], "", http.StatusOK, nil, hdr...)
		rest := events(t, r.body)
		if len(rest) != len(all)-1 || rest[0].id != all[1].id || rest[len(rest)-1].typ != "done" {
			t.Errorf("resumed after %d: %+v; want %+v", all[0].id, rest, all[1:])
		}
	}
	e, _ := s.fail(keyAlpha, "GET", "/v1/executions/"+res.ExecutionID+"/events", "", http.StatusBadRequest, "invalid_request",
		"Last-Event-ID", "seven")
	if e.Field != "Last-Event-ID" {
		t.Errorf("a bad Last-Event-ID names %q", e.Field)
	}
	s.fail(keyAlpha, "GET", "/v1/executions/nope/events", "", http.StatusNotFound, "not_found")
}

// TestListQuery: the filters of GET /v1/executions, and what is refused.
func TestListQuery(t *testing.T) {
	s := newStack(t)
	for i, code := range []string{"exit 0", "exit 1", "exit 0"} {
		req := bash(code)
		req.ExecutionID = fmt.Sprintf("e%d", i)
		s.call(keyAlpha, "POST", "/v1/executions?wait=true", jsonOf(t, req), http.StatusOK, nil)
	}
	ids := func(q string) string {
		var l listed
		s.call(keyAlpha, "GET", "/v1/executions?"+q, "", http.StatusOK, &l)
		return joined(l.Executions, func(r sandbox.Result) string { return r.ExecutionID })
	}
	for q, want := range map[string]string{
		"status=success":   "e2,e0", // newest first by default
		"status=failed":    "e1",
		"exit_code_ne=0":   "e1",
		"sort=created_at":  "e0,e1,e2",
		"sort=-created_at": "e2,e1,e0",
		"language=python":  "",
		"sort=created_at&error_type=runtime_error": "e1",
	} {
		if got := ids(q); got != want {
			t.Errorf("?%s: %s; want %s", q, got, want)
		}
	}
	// Pages: a cursor leads on from where the last page ended.
	var page listed
	s.call(keyAlpha, "GET", "/v1/executions?sort=created_at&limit=2", "", http.StatusOK, &page)
	if len(page.Executions) != 2 || page.NextCursor == "" {
		t.Fatalf("first page %+v", page)
	}
	if got := ids("sort=created_at&limit=2&cursor=" + url.QueryEscape(page.NextCursor)); got != "e2" {
		t.Errorf("second page %v", got)
	}
	for _, q := range []struct{ query, field string }{
		{"status=done", "status"},
		{"error_type=bad", "error_type"},
		{"sort=name", "sort"},
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"limit=ten", "limit"},
		{"exit_code_ne=x", "exit_code_ne"},
		{"since=yesterday", "since"},
		{"until=2024-13-01T00:00:00Z", "until"},
		{"session_id=" + url.QueryEscape("a b"), "session_id"},
		{"cursor=" + strings.Repeat("c", 513), "cursor"},
		{"language=" + strings.Repeat("l", 65), "language"},
		{"cursor=not-a-cursor", "cursor"},
	} {
		e, _ := s.fail(keyAlpha, "GET", "/v1/executions?"+q.query, "", http.StatusBadRequest, "invalid_request")
		if e.Field != q.field {
			t.Errorf("?%s: field %q, want %q", q.query, e.Field, q.field)
		}
	}
}

// TestSubmitDecode: the body is one JSON object of known fields within
// the size cap; every refusal says what is wrong, and names the field it
// knows.
func TestSubmitDecode(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true; o.api.MaxBodyBytes = 1024 })
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		field      string
	}{
		{"empty", "", 400, "invalid_json", ""},
		{"blank", "  \n", 400, "invalid_json", ""},
		{"malformed", `{"language": "bash",`, 400, "invalid_json", ""},
		{"not JSON", `language=bash`, 400, "invalid_json", ""},
		{"two objects", `{"language":"bash","code":"true"} {}`, 400, "invalid_json", ""},
		{"an unknown field", `{"language":"bash","code":"true","limit":{}}`, 400, "invalid_request", "limit"},
		{"a field of the wrong type", `{"language":"bash","code":"true","limits":{"timeout_ms":"long"}}`, 400, "invalid_request", "limits.timeout_ms"},
		{"over the cap", `{"language":"bash","code":"` + strings.Repeat("x", 1024) + `"}`, 413, "payload_too_large", ""},
		{"an unknown language", `{"language":"cobol","code":"x"}`, 400, "invalid_request", "language"},
		{"a callback without a scheme", `{"language":"bash","code":"true","callback_url":"example.com/x"}`, 400, "invalid_request", "callback_url"},
		{"a callback with credentials", `{"language":"bash","code":"true","callback_url":"https://u:p@example.com/x"}`, 400, "invalid_request", "callback_url"},
		{"a callback too long", `{"language":"bash","code":"true","callback_url":"https://example.com/` + strings.Repeat("p", 2050) + `"}`, 413, "payload_too_large", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := s.fail(keyAlpha, "POST", "/v1/executions", tc.body, tc.status, tc.code)
			if e.Field != tc.field {
				t.Errorf("field %q, want %q (%s)", e.Field, tc.field, e.Message)
			}
		})
	}
	// A callback needs its tenant's secret: alpha has one, beta none.
	cb := `{"language":"bash","code":"true","callback_url":"https://example.com/hook"}`
	s.call(keyAlpha, "POST", "/v1/executions", cb, http.StatusAccepted, nil)
	e, _ := s.fail(keyBeta, "POST", "/v1/executions", cb, http.StatusBadRequest, "invalid_request")
	if e.Field != "callback_url" {
		t.Errorf("a callback without a secret names %q", e.Field)
	}
}

// TestQueueFull: beyond the queue's bound a submission is refused as
// retryable, with Retry-After, and nothing is queued.
func TestQueueFull(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true; o.node.QueueBound = 2 })
	s.submit(keyAlpha, bash("true"))
	s.submit(keyBeta, bash("true"))
	_, r := s.fail(keyAlpha, "POST", "/v1/executions", jsonOf(t, bash("true")), http.StatusTooManyRequests, "queue_full")
	if r.retryAfter() < 1 {
		t.Errorf("queue_full without Retry-After: %v", r.header)
	}
	var l listed
	s.call(keyAlpha, "GET", "/v1/executions", "", http.StatusOK, &l)
	if len(l.Executions) != 1 {
		t.Errorf("alpha has %d executions; the refused one was queued", len(l.Executions))
	}
}

// TestTierPending: an execution for a tier still being installed is
// refused as retryable, later than a full queue.
func TestTierPending(t *testing.T) {
	// No gVisor here yet: a build of runsc is under way.
	s := newStack(t, func(o *options) { o.idle = true; o.tiers = []runtime.Tier{runtime.TierContainer} })
	s.fake.Fleet.SetPending(runtime.TierGVisor, true)
	req := bash("true")
	req.Isolation = sandbox.Isolation(runtime.TierGVisor)
	_, r := s.fail(keyAlpha, "POST", "/v1/executions", jsonOf(t, req), http.StatusServiceUnavailable, "tier_unavailable")
	// 30 s: the engine's wait for a tier being installed (docs/errors.md).
	if r.retryAfter() != 30 {
		t.Errorf("Retry-After %q, want 30", r.header.Get("Retry-After"))
	}
	// The container tier serves meanwhile.
	req.Isolation = sandbox.Isolation(runtime.TierContainer)
	s.submit(keyAlpha, req)
}
