package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/sandbox"
)

// TestSessions: a session is created by PUT (201, then 200), read, used
// by executions that share its files, and deleted; its files are
// uploaded, listed, downloaded and removed. Another tenant's is not found.
func TestSessions(t *testing.T) {
	s := newStack(t)
	var info session.Info
	s.call(keyAlpha, "PUT", "/v1/sessions/s1", `{"ttl_seconds": 600}`, http.StatusCreated, &info)
	if info.ID != "s1" {
		t.Fatalf("created %+v", info)
	}
	s.call(keyAlpha, "POST", "/v1/sessions/s1", "", http.StatusOK, nil)
	s.call(keyAlpha, "GET", "/v1/sessions/s1", "", http.StatusOK, &info)

	s.call(keyAlpha, "PUT", "/v1/sessions/s1/files/data/in.txt", "from the client\n", http.StatusNoContent, nil)
	req := bash("cat data/in.txt; echo made > out.txt")
	req.SessionID = "s1"
	var res sandbox.Result
	s.call(keyAlpha, "POST", "/v1/executions?wait=true", jsonOf(t, req), http.StatusOK, &res)
	if res.Status != sandbox.StatusSuccess || res.Stdout != "from the client\n" || res.SessionID != "s1" {
		t.Fatalf("an execution in the session: %+v", res)
	}
	r := s.call(keyAlpha, "GET", "/v1/sessions/s1/files/out.txt", "", http.StatusOK, nil)
	if string(r.body) != "made\n" || r.header.Get("Content-Type") != "application/octet-stream" ||
		r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("download: %q, %v", r.body, r.header)
	}
	var l listing
	s.call(keyAlpha, "GET", "/v1/sessions/s1/files/", "", http.StatusOK, &l)
	if names := entryNames(l.Entries); names != "data,out.txt" {
		t.Errorf("the workspace lists %s", names)
	}
	s.call(keyAlpha, "GET", "/v1/sessions/s1/files/data/", "", http.StatusOK, &l)
	if l.Path != "data" || entryNames(l.Entries) != "in.txt" {
		t.Errorf("data/ lists %+v", l)
	}
	s.call(keyAlpha, "DELETE", "/v1/sessions/s1/files/out.txt", "", http.StatusNoContent, nil)
	s.fail(keyAlpha, "GET", "/v1/sessions/s1/files/out.txt", "", http.StatusNotFound, "not_found")
	e, _ := s.fail(keyAlpha, "GET", "/v1/sessions/s1/files/data/in.txt/x", "", http.StatusBadRequest, "invalid_request")
	if e.Field != "path" {
		t.Errorf("a file used as a directory names %q", e.Field)
	}

	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/s1", ""},
		{"GET", "/v1/sessions/s1/files/data/in.txt", ""},
		{"GET", "/v1/sessions/s1/files/", ""},
		{"DELETE", "/v1/sessions/s1/files/data/in.txt", ""},
		{"DELETE", "/v1/sessions/s1", ""},
	} {
		s.fail(keyBeta, c.method, c.path, c.body, http.StatusNotFound, "not_found")
	}
	// Beta's s1 is its own; alpha's file is not in it.
	s.call(keyBeta, "PUT", "/v1/sessions/s1", "", http.StatusCreated, nil)
	s.fail(keyBeta, "GET", "/v1/sessions/s1/files/data/in.txt", "", http.StatusNotFound, "not_found")

	s.call(keyAlpha, "DELETE", "/v1/sessions/s1", "", http.StatusNoContent, nil)
	s.fail(keyAlpha, "GET", "/v1/sessions/s1", "", http.StatusNotFound, "not_found")
	s.fail(keyAlpha, "GET", "/v1/sessions/s1/files/", "", http.StatusNotFound, "not_found")
}

func entryNames(es []agent.Entry) string {
	return joined(es, func(e agent.Entry) string { return e.Name })
}

// TestSessionRefusals: bad ids, bodies and paths; sessions turned off.
func TestSessionRefusals(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true })
	for _, c := range []struct {
		method, path, body string
		status             int
		code, field        string
	}{
		{"PUT", "/v1/sessions/" + url.PathEscape("a b"), "", 404, "not_found", ""},
		{"GET", "/v1/sessions/" + strings.Repeat("s", 200), "", 404, "not_found", ""},
		{"PUT", "/v1/sessions/s2", `{"ttl": 5}`, 400, "invalid_request", "ttl"},
		{"PUT", "/v1/sessions/s2", `{"ttl_seconds": "long"}`, 400, "invalid_request", "ttl_seconds"},
		{"PUT", "/v1/sessions/s2", `{"ttl_seconds": 60`, 400, "invalid_json", ""},
		{"GET", "/v1/sessions/never", "", 404, "not_found", ""},
		{"PUT", "/v1/sessions/s2/files/..%2Fescape", "x", 400, "invalid_request", ""},
	} {
		e, _ := s.fail(keyAlpha, c.method, c.path, c.body, c.status, c.code)
		if e.Field != c.field {
			t.Errorf("%s %s: field %q, want %q", c.method, c.path, e.Field, c.field)
		}
	}
	// A disk beyond the bound is the caller's mistake.
	s.fail(keyAlpha, "PUT", "/v1/sessions/s3", `{"disk_mb": 99999999}`, http.StatusBadRequest, "invalid_request")

	off := newStack(t, func(o *options) { o.idle = true; o.noSessions = true })
	for _, path := range []string{"/v1/sessions/s1", "/v1/sessions/s1/files/x"} {
		e, _ := off.fail(keyAlpha, "GET", path, "", http.StatusNotFound, "not_found")
		if !strings.Contains(e.Message, "not enabled") {
			t.Errorf("sessions off: %q", e.Message)
		}
	}
}
