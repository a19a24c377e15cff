package files

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// plant is a program that plants links in /workspace: up to /, tl to /tmp,
// o to /tmp/out, d/mid in the middle of a path, d/in inside, last to a
// file of /tmp; and what they lead to, in /tmp.
const plant = "cd /workspace && mkdir -p d/e /tmp/out/dir && echo x > d/f && echo keep > /tmp/keep && " +
	"echo keep > /tmp/out/canary && echo keep > /tmp/out/dir/canary && ln -s / up && ln -s /tmp tl && " +
	"ln -s /tmp/out o && ln -s /tmp/out d/mid && ln -s e d/in && ln -s /tmp/keep last"

// heldOutside is a program that prints what /tmp holds.
const heldOutside = "cd /tmp && find keep out | sort && cat keep out/canary out/dir/canary"

// throughLinks pass through a planted link: first, in the middle; to /
// (the image's /etc, read-only, and /tmp), to /tmp, inside.
var throughLinks = []string{"up/etc/passwd", "up/tmp/x", "up/tmp/keep", "up/etc", "tl/keep", "tl/x", "o/canary",
	"o/dir/canary", "d/mid/canary", "d/mid/x/y", "d/in/x"}

// lastLinks end with one.
var lastLinks = []string{"last", "up", "tl", "d/in"}

// TestLinksPlanted: on both tiers, through a real corral serve, no /v1
// file call on a sandbox or a session goes through a link a program
// planted (ln -s / up, then PUT or DELETE up/etc/passwd, PUT up/tmp/x, ...):
// each answers 400 invalid_request naming the path, never 500 (EROFS) or
// a success that went through; /tmp keeps what it held; a link at the end
// is described by stat and removed as itself.
func TestLinksPlanted(t *testing.T) {
	s := testserver.Start(t, testserver.Options{})
	for _, tier := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			t.Run("sandbox", func(t *testing.T) { sandboxLinks(t, s, tier) })
			t.Run("session", func(t *testing.T) { sessionLinks(t, s, tier) })
		})
	}
}

// refused checks an answer is 400 invalid_request naming the path.
func refused(t *testing.T, what string, code int, raw []byte) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message, Field string }
	}
	if code != http.StatusBadRequest || json.Unmarshal(raw, &e) != nil || e.Error.Code != "invalid_request" ||
		e.Error.Field != "path" || !strings.Contains(e.Error.Message, "symbolic link") {
		t.Errorf("%s: %d %s, want 400 invalid_request: the path passes through a link", what, code, raw)
	}
}

func sandboxLinks(t *testing.T, s *testserver.Server, tier sandbox.Isolation) {
	id := fmt.Sprintf("links-%s-%d", tier, time.Now().UnixNano())
	base := "/v1/sandboxes/" + id
	if code, raw := s.Call(key, "POST", "/v1/sandboxes", sandbox.CreateSandboxRequest{SandboxID: id, Tier: tier, TimeoutSeconds: 600}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, raw)
	}
	t.Cleanup(func() { s.Call(key, "DELETE", base, nil, nil) })
	sh := func(script string) string {
		t.Helper()
		var p sandbox.ProcessInfo
		req := sandbox.StartProcessRequest{Cmd: []string{"sh", "-c", "(" + script + ") > /workspace/.out 2>&1"}}
		if code, raw := s.Call(key, "POST", base+"/processes", req, &p); code != http.StatusCreated {
			t.Fatalf("start: %d %s", code, raw)
		}
		if code, raw := s.Call(key, "GET", fmt.Sprintf("%s/processes/%d?wait=true", base, p.PID), nil, &p); code != http.StatusOK || p.Exit == nil || p.Exit.ExitCode != 0 {
			t.Fatalf("%s: %d %s", script, code, raw)
		}
		_, out := s.Call(key, "GET", base+"/files?path=.out", nil, nil)
		return string(out)
	}
	sh(plant)
	before := sh(heldOutside)
	q := url.QueryEscape
	call := func(method, path string, body any) (int, []byte) { return s.Call(key, method, base+path, body, nil) }
	for _, p := range throughLinks {
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"PUT", "/files?path=" + q(p), "written"},
			{"GET", "/files?path=" + q(p), nil},
			{"DELETE", "/files?path=" + q(p), nil},
			{"GET", "/files/stat?path=" + q(p), nil},
			{"GET", "/files/list?path=" + q(p), nil},
			{"GET", "/files/watch?path=" + q(p), nil},
			{"POST", "/files/mkdir", map[string]any{"path": p + "/sub", "parents": true}},
			{"POST", "/files/move", map[string]string{"from": p, "to": "moved"}},
			{"POST", "/files/move", map[string]string{"from": "d/f", "to": p}},
		} {
			code, raw := call(c.method, c.path, c.body)
			refused(t, fmt.Sprintf("%s %s %v", c.method, c.path, c.body), code, raw)
		}
	}
	for _, p := range lastLinks {
		for _, c := range []struct{ method, path string }{{"PUT", "/files?path="}, {"GET", "/files?path="}, {"GET", "/files/list?path="}, {"GET", "/files/watch?path="}} {
			code, raw := call(c.method, c.path+q(p), nil)
			refused(t, c.method+" "+c.path+p, code, raw)
		}
		var f sandbox.SandboxFile
		if code, raw := s.Call(key, "GET", base+"/files/stat?path="+q(p), nil, &f); code != http.StatusOK || f.Type != "symlink" {
			t.Errorf("stat %s: %d %s", p, code, raw)
		}
	}
	for _, p := range []string{"last", "up", "tl", "d"} {
		if code, raw := call("DELETE", "/files?path="+q(p), nil); code != http.StatusNoContent {
			t.Errorf("DELETE %s: %d %s", p, code, raw)
		}
	}
	if after := sh(heldOutside + " && ls /workspace"); after != before+"o\n" {
		t.Errorf("after the calls through links:\n%s\nwant\n%so", after, before)
	}
	// A move between /tmp and /workspace, separate file systems.
	code, raw := call("POST", "/files/move", map[string]string{"from": "/tmp/keep", "to": "keep"})
	if code != http.StatusBadRequest || !strings.Contains(string(raw), "separate file systems") {
		t.Errorf("move from /tmp to /workspace: %d %s", code, raw)
	}
}

func sessionLinks(t *testing.T, s *testserver.Server, tier sandbox.Isolation) {
	sess := fmt.Sprintf("links-%s-%d", tier, time.Now().UnixNano())
	res := run(t, s, sandbox.ExecuteRequest{SessionID: sess, Language: "bash", Isolation: tier, Code: plant})
	if res.Status != sandbox.StatusSuccess {
		t.Fatalf("plant: %+v %s", res.Error, res.Stderr)
	}
	base := "/v1/sessions/" + sess + "/files/"
	for _, p := range append(throughLinks, lastLinks...) {
		methods := []string{"PUT", "GET", "DELETE"}
		if strings.Count(p, "/") == 0 || p == "d/in" {
			methods = methods[:2] // a link at the end: removed as itself, below
		}
		for _, m := range methods {
			var body any
			if m == "PUT" {
				body = "written"
			}
			code, raw := s.Call(key, m, base+p, body, nil)
			refused(t, m+" "+base+p, code, raw)
		}
	}
	for _, p := range lastLinks {
		if code, raw := s.Call(key, "DELETE", base+p, nil, nil); code != http.StatusNoContent {
			t.Errorf("DELETE %s: %d %s", p, code, raw)
		}
	}
	res = run(t, s, sandbox.ExecuteRequest{SessionID: sess, Language: "bash", Isolation: tier, Code: "ls /workspace /workspace/d"})
	if res.Stdout != "/workspace:\nd\no\n\n/workspace/d:\ne\nf\nmid\n" {
		t.Errorf("the session's workspace holds %q", res.Stdout)
	}
}
