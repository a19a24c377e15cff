package api

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestOthersIDsTellNothing: another tenant's key is answered the same, to
// the byte, whether the id it names exists (as the first tenant's) or
// not, on every /v1 route that takes an id and does not make one: each
// call is answered while alpha's sandbox, session and execution exist,
// then after the sandbox and session are deleted (the execution, which
// cannot be, is compared with an id never used).
func TestOthersIDsTellNothing(t *testing.T) {
	s, pid, cid := bodyStack(t)
	exec := s.submit(keyAlpha, sandbox.ExecuteRequest{Language: "bash", Code: "true"})
	proc := "/v1/sandboxes/{id}/processes/" + strconv.Itoa(pid)
	ctx := "/v1/sandboxes/{id}/contexts/" + cid
	routes := [][3]string{
		{"GET", "/v1/sandboxes/{id}", ""}, {"DELETE", "/v1/sandboxes/{id}", ""},
		{"POST", "/v1/sandboxes/{id}/timeout", `{"timeout_seconds":60}`},
		{"POST", "/v1/sandboxes/{id}/pause", ""}, {"POST", "/v1/sandboxes/{id}/resume", ""},
		{"GET", "/v1/sandboxes/{id}/processes", ""}, {"POST", "/v1/sandboxes/{id}/processes", `{"shell":"true"}`},
		{"GET", proc, ""}, {"GET", proc + "/events", ""}, {"POST", proc + "/stdin", "x"}, {"POST", proc + "/stdin/close", ""},
		{"POST", proc + "/signal", `{"signal":"SIGCONT"}`}, {"POST", proc + "/resize", `{"cols":80,"rows":24}`},
		{"GET", "/v1/sandboxes/{id}/files?path=/workspace", ""}, {"PUT", "/v1/sandboxes/{id}/files?path=/workspace/a", "x"},
		{"DELETE", "/v1/sandboxes/{id}/files?path=/workspace/a", ""}, {"GET", "/v1/sandboxes/{id}/files/list", ""},
		{"GET", "/v1/sandboxes/{id}/files/stat?path=/workspace", ""}, {"POST", "/v1/sandboxes/{id}/files/mkdir", `{"path":"/workspace/d"}`},
		{"POST", "/v1/sandboxes/{id}/files/move", `{"from":"/workspace/a","to":"/workspace/b"}`},
		{"GET", "/v1/sandboxes/{id}/files/watch?path=/workspace", ""},
		{"POST", "/v1/sandboxes/{id}/contexts", `{}`}, {"GET", "/v1/sandboxes/{id}/contexts", ""},
		{"DELETE", ctx, ""}, {"POST", ctx + "/run", `{"code":"1"}`}, {"POST", ctx + "/restart", ""},
		{"POST", ctx + "/fork", ""}, {"POST", ctx + "/interrupt", ""},
		{"GET", "/v1/sessions/{session}", ""}, {"DELETE", "/v1/sessions/{session}", ""},
		{"GET", "/v1/sessions/{session}/files/a.txt", ""}, {"DELETE", "/v1/sessions/{session}/files/a.txt", ""},
		{"GET", "/v1/executions/{exec}", ""}, {"POST", "/v1/executions/{exec}/cancel", ""},
		{"GET", "/v1/executions/{exec}/events", ""}, {"GET", "/v1/executions/{exec}/egress", ""},
	}
	ask := func(rt [3]string, exec string) reply {
		t.Helper()
		path := strings.NewReplacer("{id}", "box", "{session}", "sess", "{exec}", exec).Replace(rt[1])
		r := s.do(keyBeta, rt[0], path, rt[2])
		if r.status < 400 || r.status >= 500 {
			t.Fatalf("beta %s %s: %d %s", rt[0], path, r.status, r.body)
		}
		return r
	}
	before := make([]reply, len(routes))
	for i, rt := range routes {
		before[i] = ask(rt, exec)
	}
	s.call(keyAlpha, "DELETE", "/v1/sandboxes/box", "", http.StatusNoContent, nil)
	s.call(keyAlpha, "DELETE", "/v1/sessions/sess", "", http.StatusNoContent, nil)
	for i, rt := range routes {
		after := ask(rt, "exec-never-used")
		if after.status != before[i].status || after.header.Get("Content-Type") != before[i].header.Get("Content-Type") ||
			!bytes.Equal(after.body, before[i].body) {
			t.Errorf("beta %s %s: while alpha's exists %d %s, once it is gone %d %s", rt[0], rt[1],
				before[i].status, before[i].body, after.status, after.body)
		}
	}
}
