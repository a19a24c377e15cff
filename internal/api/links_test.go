package api

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// plantLinks is a program that plants links in /workspace: out to dir
// (outside the sandbox, on the fake runtime a directory of the host), up
// to / (the host's, on the fake runtime), tl to the sandbox's /tmp, d/mid
// in the middle of a path, d/in to a directory of the workspace, last to a
// file outside. Its paths are relative: the fake runtime runs it on the
// host, in the sandbox's /workspace.
func plantLinks(dir string) string {
	return "mkdir -p d/e && echo x > d/f && ln -s / up && ln -s " + dir + " out && ln -s " + dir + " d/mid && " +
		"ln -s e d/in && ln -s " + dir + "/canary last && ln -s ../tmp tl && echo keep > ../tmp/keep"
}

// outside makes the directory the planted links lead out to, and returns
// what it holds.
func outside(t *testing.T) (string, func() []string) {
	dir := t.TempDir()
	for p, body := range map[string]string{"canary": "keep", "dir/canary": "keep"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	held := func() []string {
		var out []string
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			b, _ := os.ReadFile(p)
			out = append(out, p+" "+fi.Mode().String()+" "+string(b))
			return nil
		})
		return out
	}
	return dir, held
}

// throughLinks are paths (relative to /workspace) that pass through a
// planted link: first in the path, in its middle; to outside, to /, to the
// sandbox's /tmp, inside.
func throughLinks(dir string) []string {
	return []string{"out/canary", "out/new", "out/dir/canary", "up" + dir + "/canary", "up" + dir + "/new",
		"tl/keep", "tl/new", "d/mid/canary", "d/mid/new", "d/mid/dir/canary", "d/in/x"}
}

// lastLinks are paths whose last component is a planted link.
var lastLinks = []string{"last", "up", "tl", "d/in"}

// TestFileLinks: no /v1 file call, on a session or a sandbox, goes
// through a link a program planted, wherever it is in the path and
// wherever it leads: each answers 400 invalid_request naming the path,
// and nothing outside changes. A link at the end is described by stat and
// removed as itself. On the fake runtime "outside" is the host, so a call
// that went through would show.
func TestFileLinks(t *testing.T) {
	s := newStack(t)
	dir, held := outside(t)
	before := held()

	// A sandbox's.
	s.createBox(keyAlpha, "box", nil)
	p := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"sh", "-c", plantLinks(dir)}})
	if info := s.wait(keyAlpha, "box", p.PID); info.Exit.ExitCode != 0 {
		t.Fatalf("plant links: %+v", info.Exit)
	}
	refused := func(method, path, body string) {
		t.Helper()
		e, _ := s.fail(keyAlpha, method, path, body, http.StatusBadRequest, "invalid_request")
		if e.Field != "path" || !strings.Contains(e.Message, "symbolic link") {
			t.Errorf("%s %s: %+v", method, path, e)
		}
	}
	q := func(p string) string { return url.QueryEscape(p) }
	for _, p := range throughLinks(dir) {
		refused("PUT", "/v1/sandboxes/box/files?path="+q(p), "written")
		refused("GET", "/v1/sandboxes/box/files?path="+q(p), "")
		refused("DELETE", "/v1/sandboxes/box/files?path="+q(p), "")
		refused("GET", "/v1/sandboxes/box/files/stat?path="+q(p), "")
		refused("GET", "/v1/sandboxes/box/files/list?path="+q(p), "")
		refused("GET", "/v1/sandboxes/box/files/watch?path="+q(p), "")
		refused("POST", "/v1/sandboxes/box/files/mkdir", jsonOf(t, map[string]any{"path": p + "/sub", "parents": true}))
		refused("POST", "/v1/sandboxes/box/files/move", jsonOf(t, map[string]string{"from": p, "to": "moved"}))
		refused("POST", "/v1/sandboxes/box/files/move", jsonOf(t, map[string]string{"from": "d/f", "to": p}))
	}
	for _, p := range lastLinks {
		refused("PUT", "/v1/sandboxes/box/files?path="+q(p), "written")
		refused("GET", "/v1/sandboxes/box/files?path="+q(p), "")
		refused("GET", "/v1/sandboxes/box/files/list?path="+q(p), "")
		refused("GET", "/v1/sandboxes/box/files/watch?path="+q(p), "")
		refused("POST", "/v1/sandboxes/box/files/mkdir", jsonOf(t, map[string]any{"path": p, "parents": true}))
		var f sandbox.SandboxFile
		s.call(keyAlpha, "GET", "/v1/sandboxes/box/files/stat?path="+q(p), "", http.StatusOK, &f)
		if f.Type != "symlink" || f.SymlinkTarget == "" {
			t.Errorf("stat %s: %+v", p, f)
		}
	}
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/files/move", `{"from": "last", "to": "d/last"}`, http.StatusOK, nil)
	for _, p := range []string{"d/last", "up", "tl", "d"} {
		s.call(keyAlpha, "DELETE", "/v1/sandboxes/box/files?path="+q(p), "", http.StatusNoContent, nil)
	}
	var l sandbox.SandboxFileList
	s.call(keyAlpha, "GET", "/v1/sandboxes/box/files/list", "", http.StatusOK, &l)
	if got := joined(l.Entries, func(e sandbox.SandboxFile) string { return e.Name }); got != "out" {
		t.Errorf("the workspace holds %s", got)
	}
	r := s.call(keyAlpha, "GET", "/v1/sandboxes/box/files?path=/tmp/keep", "", http.StatusOK, nil)
	if string(r.body) != "keep\n" {
		t.Errorf("/tmp/keep holds %q", r.body)
	}

	// A session's.
	s.call(keyAlpha, "PUT", "/v1/sessions/s1", `{"ttl_seconds": 600}`, http.StatusCreated, nil)
	req := bash(plantLinks(dir))
	req.SessionID = "s1"
	var res sandbox.Result
	s.call(keyAlpha, "POST", "/v1/executions?wait=true", jsonOf(t, req), http.StatusOK, &res)
	if res.Status != sandbox.StatusSuccess {
		t.Fatalf("plant links: %+v", res)
	}
	for _, p := range append(throughLinks(dir), lastLinks...) {
		refused("PUT", "/v1/sessions/s1/files/"+p, "written")
		refused("GET", "/v1/sessions/s1/files/"+p, "")
		if !slices.Contains(lastLinks, p) {
			refused("DELETE", "/v1/sessions/s1/files/"+p, "")
		}
	}
	for _, p := range lastLinks {
		s.call(keyAlpha, "DELETE", "/v1/sessions/s1/files/"+p, "", http.StatusNoContent, nil)
	}
	var sl listing
	s.call(keyAlpha, "GET", "/v1/sessions/s1/files/", "", http.StatusOK, &sl)
	if names := entryNames(sl.Entries); names != "d,out" {
		t.Errorf("the session's workspace holds %s", names)
	}

	if after := held(); !slices.Equal(after, before) {
		t.Errorf("outside the sandboxes: %q, was %q", after, before)
	}
}

// TestFileRefusals: what else a hostile path or a program's leftovers
// make a file call fail with is a 400 naming the path, on both /v1 file
// APIs: a path through a file (ENOTDIR), a name and a path too long
// (5,000 bytes, and a relative path's 300-byte name: refused before the
// agent; an absolute path's 300-byte name: by the agent, ENAMETOOLONG), a
// socket read.
func TestFileRefusals(t *testing.T) {
	s := newStack(t)
	s.createBox(keyAlpha, "box", nil)
	p := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"python3", "-c",
		"import socket; open('f', 'w').write('x'); socket.socket(socket.AF_UNIX).bind('sock')"}})
	if info := s.wait(keyAlpha, "box", p.PID); info.Exit.ExitCode != 0 {
		t.Fatalf("make a file and a socket: %+v", info.Exit)
	}
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/files/mkdir", `{"path": "d"}`, http.StatusCreated, nil)
	s.call(keyAlpha, "PUT", "/v1/sessions/s1/files/f", "x", http.StatusNoContent, nil)
	s.call(keyAlpha, "PUT", "/v1/sessions/s1/files/d/keep", "x", http.StatusNoContent, nil)
	// The agent's refusals name the path; what Corral refuses before
	// asking the agent may not.
	refused := func(method, path, body string, field bool) {
		t.Helper()
		e, _ := s.fail(keyAlpha, method, path, body, http.StatusBadRequest, "invalid_request")
		if field && e.Field != "path" {
			t.Errorf("%s %.80s: %+v", method, path, e)
		}
	}
	long, name := strings.Repeat("n", 5000), strings.Repeat("n", 300)
	for _, c := range []struct {
		path  string
		agent bool
	}{
		{"f/x", true}, {"/workspace/" + name, true}, {"/workspace/d/" + name, true},
		{name, false}, {long, false}, {"d/" + long, false}, {"/workspace/" + long, false}, {strings.Repeat("d/", 2500) + "x", false},
	} {
		p := c.path
		refused("PUT", "/v1/sandboxes/box/files?path="+p, "x", c.agent)
		refused("GET", "/v1/sandboxes/box/files?path="+p, "", c.agent)
		refused("DELETE", "/v1/sandboxes/box/files?path="+p+"/y", "", c.agent)
		refused("GET", "/v1/sandboxes/box/files/stat?path="+p, "", c.agent)
		refused("GET", "/v1/sandboxes/box/files/list?path="+p, "", c.agent)
		refused("POST", "/v1/sandboxes/box/files/mkdir", jsonOf(t, map[string]any{"path": p + "/y", "parents": true}), c.agent)
		refused("POST", "/v1/sandboxes/box/files/move", jsonOf(t, map[string]string{"from": "f", "to": p}), c.agent)
		if !strings.HasPrefix(p, "/") {
			refused("PUT", "/v1/sessions/s1/files/"+p, "x", c.agent)
			refused("GET", "/v1/sessions/s1/files/"+p, "", c.agent)
			refused("DELETE", "/v1/sessions/s1/files/"+p+"/y", "", c.agent)
		}
	}
	refused("GET", "/v1/sandboxes/box/files?path=sock", "", true)
}
