package api

import (
	"net/http"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestSandboxFiles: a live sandbox's files by path: written, read,
// stated, listed (to a depth), made, moved and removed; what the agent
// refuses is answered by its kind.
func TestSandboxFiles(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true })
	s.createBox(keyAlpha, "box", nil)
	var f sandbox.SandboxFile
	s.call(keyAlpha, "PUT", "/v1/sandboxes/box/files?path=/workspace/a.txt", "alpha\n", http.StatusOK, &f)
	if f.Path != "/workspace/a.txt" || f.Size != 6 || f.Type != "file" {
		t.Errorf("wrote %+v", f)
	}
	r := s.call(keyAlpha, "GET", "/v1/sandboxes/box/files?path=a.txt", "", http.StatusOK, nil)
	if string(r.body) != "alpha\n" || r.header.Get("Content-Security-Policy") != "sandbox" {
		t.Errorf("read %q, %v", r.body, r.header)
	}
	s.call(keyAlpha, "PUT", "/v1/sandboxes/box/files?path=/workspace/empty", "", http.StatusOK, nil)
	if r := s.call(keyAlpha, "GET", "/v1/sandboxes/box/files?path=/workspace/empty", "", http.StatusOK, nil); len(r.body) != 0 {
		t.Errorf("an empty file reads %q", r.body)
	}
	s.call(keyAlpha, "GET", "/v1/sandboxes/box/files/stat?path=/workspace/a.txt", "", http.StatusOK, &f)
	if f.Name != "a.txt" || f.Size != 6 {
		t.Errorf("stat %+v", f)
	}
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/files/mkdir", `{"path": "/workspace/d/e", "parents": true}`, http.StatusCreated, &f)
	if f.Type != "dir" {
		t.Errorf("made %+v", f)
	}
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/files/move", `{"from": "/workspace/a.txt", "to": "/workspace/d/e/b.txt"}`, http.StatusOK, &f)
	if f.Path != "/workspace/d/e/b.txt" {
		t.Errorf("moved to %+v", f)
	}
	list := func(query string) string {
		var l sandbox.SandboxFileList
		s.call(keyAlpha, "GET", "/v1/sandboxes/box/files/list"+query, "", http.StatusOK, &l)
		return joined(l.Entries, func(e sandbox.SandboxFile) string { return e.Path })
	}
	if got := list(""); got != "/workspace/d,/workspace/empty" {
		t.Errorf("the workspace lists %s", got)
	}
	if got := list("?path=/workspace&depth=3"); got != "/workspace/d,/workspace/d/e,/workspace/d/e/b.txt,/workspace/empty" {
		t.Errorf("to depth 3: %s", got)
	}
	s.call(keyAlpha, "DELETE", "/v1/sandboxes/box/files?path=/workspace/d/e/b.txt", "", http.StatusNoContent, nil)
	s.fail(keyAlpha, "GET", "/v1/sandboxes/box/files?path=/workspace/d/e/b.txt", "", http.StatusNotFound, "not_found")
	s.fail(keyAlpha, "GET", "/v1/sandboxes/box/files/stat?path=/workspace/gone", "", http.StatusNotFound, "not_found")

	for _, c := range []struct {
		method, path, body string
		status             int
		code, field        string
	}{
		{"GET", "/v1/sandboxes/box/files", "", 400, "invalid_request", "path"},
		{"PUT", "/v1/sandboxes/box/files", "x", 400, "invalid_request", "path"},
		{"DELETE", "/v1/sandboxes/box/files", "", 400, "invalid_request", "path"},
		{"GET", "/v1/sandboxes/box/files/stat", "", 400, "invalid_request", "path"},
		{"GET", "/v1/sandboxes/box/files/list?depth=0", "", 400, "invalid_request", "depth"},
		{"GET", "/v1/sandboxes/box/files/list?depth=deep", "", 400, "invalid_request", "depth"},
		{"GET", "/v1/sandboxes/box/files?path=/workspace/d", "", 400, "invalid_request", "path"},
		{"GET", "/v1/sandboxes/box/files?path=/proc/self/environ", "", 400, "invalid_request", ""},
		{"POST", "/v1/sandboxes/box/files/mkdir", `{"path": "/workspace/x/y"}`, 404, "not_found", ""},
		{"POST", "/v1/sandboxes/box/files/move", `{"from": "/workspace/empty", "to": "/workspace/d"}`, 400, "invalid_request", "path"},
		{"POST", "/v1/sandboxes/box/files/move", `{"form": "/workspace/empty"}`, 400, "invalid_request", "form"},
	} {
		e, _ := s.fail(keyAlpha, c.method, c.path, c.body, c.status, c.code)
		if e.Field != c.field {
			t.Errorf("%s %s: field %q, want %q (%s)", c.method, c.path, e.Field, c.field, e.Message)
		}
	}
}
