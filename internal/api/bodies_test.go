package api

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// bodyRoute is a /v1 route that reads a body, with a good one.
type bodyRoute struct {
	method, path, body string
	json               bool // the body is JSON
}

// bodyRoutes are every /v1 route that reads a body, for box's process
// pid and context cid.
func bodyRoutes(pid int, cid string) []bodyRoute {
	proc := fmt.Sprintf("/v1/sandboxes/box/processes/%d", pid)
	return []bodyRoute{
		{"POST", "/v1/executions", `{"language":"bash","code":"true"}`, true},
		{"PUT", "/v1/sessions/sess", `{"ttl_seconds":60}`, true},
		{"POST", "/v1/sessions/sess", `{"ttl_seconds":60}`, true},
		{"PUT", "/v1/sessions/sess/files/a.txt", "x", false},
		{"POST", "/v1/sandboxes", `{"language":"bash"}`, true},
		{"POST", "/v1/sandboxes/box/timeout", `{"timeout_seconds":60}`, true},
		{"POST", "/v1/sandboxes/box/processes", `{"shell":"true"}`, true},
		{"POST", proc + "/stdin", "x", false},
		{"POST", proc + "/signal", `{"signal":"SIGCONT"}`, true},
		{"POST", proc + "/resize", `{"cols":80,"rows":24}`, true},
		{"PUT", "/v1/sandboxes/box/files?path=/workspace/a.txt", "x", false},
		{"POST", "/v1/sandboxes/box/files/mkdir", `{"path":"/workspace/d"}`, true},
		{"POST", "/v1/sandboxes/box/files/move", `{"from":"/workspace/a.txt","to":"/workspace/b.txt"}`, true},
		{"POST", "/v1/sandboxes/box/contexts", `{"language":"python"}`, true},
		{"POST", "/v1/sandboxes/box/contexts/" + cid + "/run", `{"code":"1"}`, true},
	}
}

// bodyStack is a stack with a sandbox "box" running a process on a
// terminal (stdin open, reading nothing) and a python context, and a
// session "sess".
func bodyStack(t *testing.T) (*stack, int, string) {
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts run it in local mode)")
	s := newStack(t, func(o *options) { o.idle = true })
	s.createBox(keyAlpha, "box", nil)
	p := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Shell: "sleep 600", PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}})
	var c sandbox.CodeContext
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/contexts", `{"language":"python"}`, http.StatusCreated, &c)
	s.call(keyAlpha, "PUT", "/v1/sessions/sess", "", http.StatusCreated, nil)
	return s, p.PID, c.ID
}

// TestBodyCutShort: a body that ends before its Content-Length (the
// client gone after five bytes of 100000) is answered 400 with a JSON
// error, or the connection closed, on every route that reads one: never
// a 5xx, never a hang; the server serves on.
func TestBodyCutShort(t *testing.T) {
	s, pid, cid := bodyStack(t)
	for _, rt := range bodyRoutes(pid, cid) {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			h := http.Header{"Authorization": {"Bearer " + keyAlpha}, "Content-Type": {"application/octet-stream"}}
			if rt.json {
				h.Set("Content-Type", "application/json")
			}
			res := testenv.CutShort(t, s.url, rt.method, rt.path, h, "")
			if res == nil {
				return // closed without an answer
			}
			body, _ := io.ReadAll(res.Body)
			checkError(t, rt.method+" "+rt.path, reply{status: res.StatusCode, header: res.Header, body: body},
				http.StatusBadRequest, "invalid_request")
		})
	}
	s.call(keyAlpha, "GET", "/v1/sandboxes/box", "", http.StatusOK, nil)
	s.call(keyAlpha, "GET", "/v1/sessions/sess", "", http.StatusOK, nil)
}

// TestBodyStrictJSON: a JSON body is one value and nothing after it, on
// every route that reads one.
func TestBodyStrictJSON(t *testing.T) {
	s, pid, cid := bodyStack(t)
	for _, rt := range bodyRoutes(pid, cid) {
		if !rt.json {
			continue
		}
		for _, tail := range []string{" x", " {}", "}", " null"} {
			s.fail(keyAlpha, rt.method, rt.path, rt.body+tail, http.StatusBadRequest, "invalid_json")
		}
	}
}

// TestBodyIntegerRanges: every count of time, memory, disk, processes a
// request gives is checked in its own unit before it is used: the
// extremes of int64 are refused as -1 is, never wrapped into the default
// or a negative duration.
func TestBodyIntegerRanges(t *testing.T) {
	s, _, cid := bodyStack(t)
	for _, c := range []struct {
		method, path, field, body string
	}{
		{"PUT", "/v1/sessions/other", "", `{"ttl_seconds":%d}`},
		{"PUT", "/v1/sessions/other", "", `{"disk_mb":%d}`},
		{"POST", "/v1/sandboxes", "timeout_seconds", `{"timeout_seconds":%d}`},
		{"POST", "/v1/sandboxes", "limits.memory_mb", `{"limits":{"memory_mb":%d}}`},
		{"POST", "/v1/sandboxes", "limits.pids", `{"limits":{"pids":%d}}`},
		{"POST", "/v1/sandboxes", "limits.disk_mb", `{"limits":{"disk_mb":%d}}`},
		{"POST", "/v1/sandboxes/box/timeout", "timeout_seconds", `{"timeout_seconds":%d}`},
		{"POST", "/v1/sandboxes/box/contexts/" + cid + "/run", "timeout_seconds", `{"code":"1","timeout_seconds":%d}`},
		{"POST", "/v1/executions", "limits.timeout_ms", `{"language":"bash","code":"true","limits":{"timeout_ms":%d}}`},
		{"POST", "/v1/executions", "limits.memory_mb", `{"language":"bash","code":"true","limits":{"memory_mb":%d}}`},
		{"POST", "/v1/executions", "limits.disk_mb", `{"language":"bash","code":"true","limits":{"disk_mb":%d}}`},
	} {
		for _, n := range []int64{-1, math.MinInt64, math.MaxInt64, math.MaxInt64 / 1000, math.MinInt64 / 1000} {
			e, _ := s.fail(keyAlpha, c.method, c.path, fmt.Sprintf(c.body, n), http.StatusBadRequest, "invalid_request")
			if e.Field != c.field {
				t.Errorf("%s %s %d: field %q, want %q", c.method, c.path, n, e.Field, c.field)
			}
		}
	}
	for _, body := range []string{`{"limits":{"cpu_cores":1e308}}`, `{"limits":{"cpu_cores":-1e308}}`, `{"limits":{"memory_mb":1e30}}`} {
		s.fail(keyAlpha, "POST", "/v1/sandboxes", body, http.StatusBadRequest, "invalid_request")
	}
}

// TestFieldBounds: a working directory or a path over PATH_MAX (5,000
// bytes, 1 MB) or NAME_MAX, and a cell's code over 1 MiB, are refused 400
// naming the field and the bound, in the words E2B's code interpreter
// answers them with (internal/e2b/interp), before the sandbox is asked;
// the sandbox lives on.
func TestFieldBounds(t *testing.T) {
	s, _, cid := bodyStack(t)
	for _, cwd := range []string{
		"/" + strings.Repeat("a", 5000),
		"/" + strings.Repeat("a", 1<<20),
		"/workspace/" + strings.Repeat("n", validate.MaxName+1),
		"/work\x00space",
	} {
		want := validate.CheckAbsPath(cwd).Error()
		for _, c := range []struct{ path, field, body string }{
			{"/v1/sandboxes/box/contexts", "cwd", jsonOf(t, sandbox.ContextRequest{Language: "python", Cwd: cwd})},
			{"/v1/sandboxes/box/processes", "cwd", jsonOf(t, sandbox.StartProcessRequest{Shell: "true", Cwd: cwd})},
			{"/v1/sandboxes/box/files/mkdir", "path", jsonOf(t, map[string]string{"path": cwd})},
		} {
			e, _ := s.fail(keyAlpha, "POST", c.path, c.body, http.StatusBadRequest, "invalid_request")
			if e.Field != c.field || !strings.Contains(e.Message, want) {
				t.Errorf("POST %s, %d bytes: %+v; want field %s saying %q", c.path, len(cwd), e, c.field, want)
			}
		}
		if len(cwd) < 8000 {
			e, _ := s.fail(keyAlpha, "PUT", "/v1/sandboxes/box/files?path="+url.QueryEscape(cwd), "x", http.StatusBadRequest, "invalid_request")
			if e.Field != "path" || !strings.Contains(e.Message, want) {
				t.Errorf("PUT a file, %d bytes: %+v; want field path saying %q", len(cwd), e, want)
			}
		}
	}
	code := strings.Repeat("#", kernel.MaxCodeSize+1)
	e, _ := s.fail(keyAlpha, "POST", "/v1/sandboxes/box/contexts/"+cid+"/run", jsonOf(t, sandbox.RunCodeRequest{Code: code}),
		http.StatusBadRequest, "invalid_request")
	if e.Field != "code" {
		t.Errorf("code over 1 MiB: %+v", e)
	}
	e, _ = s.fail(keyAlpha, "POST", "/v1/sandboxes/box/contexts", `{"env":{"PATH":"/x"}}`, http.StatusBadRequest, "invalid_request")
	if e.Field != "env.PATH" {
		t.Errorf("a context's env of PATH: %+v", e)
	}
	var info sandbox.Info
	s.call(keyAlpha, "GET", "/v1/sandboxes/box", "", http.StatusOK, &info)
	if info.State != "running" || info.Restarts != 0 {
		t.Errorf("after the refusals: %+v", info)
	}
}

// TestBodyCutShortForwarded: a body cut short on its way through another
// node to the sandbox's owner is the client's 400 (or the connection
// closed), not a 503 saying the owner is not answering, and never an
// empty 200.
func TestBodyCutShortForwarded(t *testing.T) {
	w := newWorld(t)
	a := w.stack(func(o *options) { o.id = "node-a"; o.idle = true })
	b := w.stack(func(o *options) { o.id = "node-b"; o.idle = true })
	a.createBox(keyAlpha, "box", nil)
	p := a.start(keyAlpha, "box", sandbox.StartProcessRequest{Shell: "sleep 600", Stdin: true})
	for _, rt := range []struct{ method, path string }{
		{"POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/stdin", p.PID)},
		{"POST", "/v1/sandboxes/box/processes"},
		{"PUT", "/v1/sandboxes/box/files?path=/workspace/a.txt"},
	} {
		for range 3 { // the client's leaving and its body's end race on node b
			res := testenv.CutShort(t, b.url, rt.method, rt.path, http.Header{"Authorization": {"Bearer " + keyAlpha}}, "")
			if res == nil {
				continue
			}
			body, _ := io.ReadAll(res.Body)
			checkError(t, rt.method+" "+rt.path+" through node b", reply{status: res.StatusCode, header: res.Header, body: body},
				http.StatusBadRequest, "invalid_request")
		}
	}
	b.call(keyAlpha, "GET", "/v1/sandboxes/box", "", http.StatusOK, nil)
}
