package api

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// The fake runtime's agents run code contexts with the host's python.
const hostPython = "/usr/bin/python3"

// TestContexts: code contexts of a live sandbox are made, listed, run
// (as one JSON answer or as an event stream), forked, restarted,
// interrupted and deleted; an unknown one is not found.
func TestContexts(t *testing.T) {
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts run it in local mode)")
	s := newStack(t, func(o *options) { o.idle = true })
	s.createBox(keyAlpha, "box", nil)
	var c sandbox.CodeContext
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/contexts", `{"env": {"GREETING": "hi"}}`, http.StatusCreated, &c)
	if c.ID == "" || c.Language != "python" {
		t.Fatalf("created %+v", c)
	}
	base := "/v1/sandboxes/box/contexts/" + c.ID
	var out sandbox.ContextEventList
	s.call(keyAlpha, "POST", base+"/run", `{"code": "import os\nx = 6 * 7\nprint(os.environ['GREETING'])\nx"}`, http.StatusOK, &out,
		"Accept", "application/json")
	if text, result := cellOutput(out.Events); text != "hi\n" || result != "42" {
		t.Errorf("a cell answered %+v", out.Events)
	}
	// The same cell as a stream: the state is kept; it ends with the end
	// of its execution.
	r := s.call(keyAlpha, "POST", base+"/run", `{"code": "x + 1"}`, http.StatusOK, nil)
	var evs []sandbox.ContextEvent
	for _, ev := range events(t, r.body) {
		var ce sandbox.ContextEvent
		if err := json.Unmarshal([]byte(ev.data), &ce); err != nil || ce.Type != ev.typ {
			t.Fatalf("event %+v: %v", ev, err)
		}
		evs = append(evs, ce)
	}
	if _, result := cellOutput(evs); result != "43" || evs[len(evs)-1].Type != sandbox.ContextEventEndOfExecution {
		t.Errorf("a streamed cell: %+v", evs)
	}

	var fork sandbox.CodeContext
	s.call(keyAlpha, "POST", base+"/fork", "", http.StatusCreated, &fork)
	var l sandbox.ContextList
	s.call(keyAlpha, "GET", "/v1/sandboxes/box/contexts", "", http.StatusOK, &l)
	if len(l.Contexts) != 2 {
		t.Errorf("listed %+v", l)
	}
	s.call(keyAlpha, "POST", base+"/interrupt", "", http.StatusNoContent, nil)
	s.call(keyAlpha, "POST", base+"/restart", "", http.StatusNoContent, nil)
	s.call(keyAlpha, "POST", base+"/run", `{"code": "x"}`, http.StatusOK, &out, "Accept", "application/json")
	if name := cellError(out.Events); name != "NameError" {
		t.Errorf("after a restart x is %+v", out.Events)
	}
	s.call(keyAlpha, "DELETE", base, "", http.StatusNoContent, nil)
	for _, call := range []struct{ method, path, body string }{
		{"POST", base + "/run", `{"code": "1"}`}, {"DELETE", base, ""}, {"POST", base + "/restart", ""},
		{"POST", base + "/interrupt", ""}, {"POST", base + "/fork", ""},
	} {
		s.fail(keyAlpha, call.method, call.path, call.body, http.StatusNotFound, "not_found")
	}
	fb := "/v1/sandboxes/box/contexts/" + fork.ID + "/run"
	e, _ := s.fail(keyAlpha, "POST", fb, `{"code": "1", "timeout_seconds": -1}`, http.StatusBadRequest, "invalid_request")
	if e.Field != "timeout_seconds" {
		t.Errorf("a negative timeout names %q", e.Field)
	}
	s.fail(keyAlpha, "POST", fb, `{"cell": "1"}`, http.StatusBadRequest, "invalid_request")
	s.fail(keyAlpha, "POST", "/v1/sandboxes/box/contexts", `{"language": "cobol"}`, http.StatusBadRequest, "invalid_request")
	s.fail(keyAlpha, "POST", "/v1/sandboxes/box/contexts", `{"cwd": "relative"}`, http.StatusBadRequest, "invalid_request")
}

// cellOutput is a cell's stdout and its main result's text.
func cellOutput(evs []sandbox.ContextEvent) (stdout, result string) {
	for _, ev := range evs {
		switch {
		case ev.Type == sandbox.ContextEventStdout:
			stdout += ev.Text
		case ev.Type == sandbox.ContextEventResult && ev.IsMain:
			result = ev.Data["text/plain"]
		}
	}
	return stdout, result
}

func cellError(evs []sandbox.ContextEvent) string {
	for _, ev := range evs {
		if ev.Type == sandbox.ContextEventError {
			return ev.Name
		}
	}
	return ""
}
