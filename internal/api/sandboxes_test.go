package api

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/sandbox"
)

// TestMetadataFilter: both forms of the filter, together; a pair without
// "=" is refused.
func TestMetadataFilter(t *testing.T) {
	for _, c := range []struct {
		query string
		want  map[string]string
		bad   bool
	}{
		{"", map[string]string{}, false},
		{"metadata.a=1&metadata.b=two%20words", map[string]string{"a": "1", "b": "two words"}, false},
		{"metadata=a%3D1%26b%3D2&metadata.c=3", map[string]string{"a": "1", "b": "2", "c": "3"}, false},
		{"metadata=a%3D", map[string]string{"a": ""}, false},
		{"metadata=novalue", nil, true},
		{"metadata=%3Dv", nil, true},
		{"other=x", map[string]string{}, false},
	} {
		got, e := metadataFilter(httptest.NewRequest("GET", "/v1/sandboxes?"+c.query, nil))
		if (e != nil) != c.bad || (!c.bad && !maps.Equal(got, c.want)) {
			t.Errorf("%q: %v, %v; want %v (refused %v)", c.query, got, e, c.want, c.bad)
		}
	}
}

// createBox creates live sandbox id for key's tenant with md as its
// metadata.
func (s *stack) createBox(key, id string, md map[string]string) sandbox.Info {
	s.t.Helper()
	var info sandbox.Info
	r := s.call(key, "POST", "/v1/sandboxes", jsonOf(s.t, sandbox.CreateSandboxRequest{SandboxID: id, Metadata: md}),
		http.StatusCreated, &info)
	if info.SandboxID != id || info.State != "running" || !maps.Equal(info.Metadata, md) {
		s.t.Fatalf("created %+v", info)
	}
	if loc := r.header.Get("Location"); loc != "/v1/sandboxes/"+id {
		s.t.Errorf("Location %q", loc)
	}
	return info
}

// TestSandboxes: create, get, list by metadata, timeout, pause, resume
// and kill; another tenant's sandbox is not found and not listed.
func TestSandboxes(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true })
	red := s.createBox(keyAlpha, "box-red", map[string]string{"team": "red", "env": "prod"})
	s.createBox(keyAlpha, "box-blue", map[string]string{"team": "blue", "env": "prod"})
	s.createBox(keyBeta, "box-beta", map[string]string{"team": "red"})
	var info sandbox.Info
	s.call(keyAlpha, "GET", "/v1/sandboxes/box-red", "", http.StatusOK, &info)
	if info.SandboxID != "box-red" || info.Language != "bash" || !info.ExpiresAt.Equal(red.ExpiresAt) {
		t.Errorf("got %+v", info)
	}
	list := func(key, query string) string {
		var l sandbox.SandboxList
		s.call(key, "GET", "/v1/sandboxes"+query, "", http.StatusOK, &l)
		return joined(l.Sandboxes, func(sb sandbox.Info) string { return sb.SandboxID })
	}
	for q, want := range map[string]string{
		"":                                     "box-blue,box-red",
		"?metadata.team=red":                   "box-red",
		"?metadata=team%3Dred%26env%3Dprod":    "box-red",
		"?metadata.env=prod":                   "box-blue,box-red",
		"?metadata.env=prod&metadata.team=red": "box-red",
		"?metadata.team=green":                 "",
	} {
		if got := list(keyAlpha, q); got != want {
			t.Errorf("alpha lists %s: %s; want %s", q, got, want)
		}
	}
	if got := list(keyBeta, ""); got != "box-beta" {
		t.Errorf("beta lists %s", got)
	}
	s.fail(keyAlpha, "GET", "/v1/sandboxes?metadata=novalue", "", http.StatusBadRequest, "invalid_request")

	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/box-red", ""},
		{"DELETE", "/v1/sandboxes/box-red", ""},
		{"POST", "/v1/sandboxes/box-red/timeout", `{"timeout_seconds": 60}`},
		{"POST", "/v1/sandboxes/box-red/pause", ""},
		{"POST", "/v1/sandboxes/box-red/processes", `{"cmd": ["true"]}`},
		{"GET", "/v1/sandboxes/box-red/processes", ""},
		{"GET", "/v1/sandboxes/box-red/files?path=/workspace", ""},
		{"GET", "/v1/sandboxes/box-red/files/list", ""},
		{"GET", "/v1/sandboxes/box-red/contexts", ""},
	} {
		s.fail(keyBeta, c.method, c.path, c.body, http.StatusNotFound, "not_found")
	}

	// The timeout moves from now, to what is asked.
	before := time.Now()
	s.call(keyAlpha, "POST", "/v1/sandboxes/box-red/timeout", `{"timeout_seconds": 3600}`, http.StatusOK, &info)
	if info.TimeoutSeconds != 3600 || info.ExpiresAt.Before(before.Add(59*time.Minute)) {
		t.Errorf("after a timeout of an hour: %+v", info)
	}
	s.fail(keyAlpha, "POST", "/v1/sandboxes/box-red/timeout", `{"timeout": 5}`, http.StatusBadRequest, "invalid_request")

	s.call(keyAlpha, "POST", "/v1/sandboxes/box-red/pause", "", http.StatusOK, &info)
	if info.State != "paused" || info.Pause == nil {
		t.Fatalf("paused: %+v", info)
	}
	s.fail(keyAlpha, "POST", "/v1/sandboxes/box-red/processes", `{"cmd": ["true"]}`, http.StatusConflict, "sandbox_paused")
	s.fail(keyAlpha, "POST", "/v1/sandboxes/box-red/pause", "", http.StatusConflict, "sandbox_paused")
	s.call(keyAlpha, "POST", "/v1/sandboxes/box-red/resume", "", http.StatusOK, &info)
	if info.State != "running" {
		t.Errorf("resumed: %+v", info)
	}
	s.fail(keyAlpha, "POST", "/v1/sandboxes/box-red/resume", "", http.StatusConflict, "not_paused")

	s.call(keyAlpha, "DELETE", "/v1/sandboxes/box-red", "", http.StatusNoContent, nil)
	s.fail(keyAlpha, "GET", "/v1/sandboxes/box-red", "", http.StatusNotFound, "not_found")
	s.fail(keyAlpha, "DELETE", "/v1/sandboxes/box-red", "", http.StatusNotFound, "not_found")
	if got := list(keyAlpha, ""); got != "box-blue" {
		t.Errorf("after the kill alpha lists %s", got)
	}
}

// TestSandboxRefusals: what a create may not be; ids and sandboxes
// turned off.
func TestSandboxRefusals(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true })
	s.createBox(keyAlpha, "taken", nil)
	for _, c := range []struct {
		name, body  string
		status      int
		code, field string
	}{
		{"an unknown field", `{"langauge": "bash"}`, 400, "invalid_request", "langauge"},
		{"malformed", `{"language": `, 400, "invalid_json", ""},
		{"over the cap", `{"env": {"A": "` + strings.Repeat("a", httpbody.MaxJSON) + `"}}`, 413, "payload_too_large", ""},
		{"an unknown language", `{"language": "cobol"}`, 400, "invalid_request", "language"},
		{"an id in use", `{"sandbox_id": "taken"}`, 409, "conflict", "sandbox_id"},
		{"too many metadata pairs", jsonOf(t, sandbox.CreateSandboxRequest{Metadata: manyPairs(33)}), 400, "invalid_request", "metadata"},
		{"a disk beyond the bound", `{"limits": {"disk_mb": 99999999}}`, 400, "invalid_request", "limits.disk_mb"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := s.fail(keyAlpha, "POST", "/v1/sandboxes", c.body, c.status, c.code)
			if e.Field != c.field {
				t.Errorf("field %q, want %q (%s)", e.Field, c.field, e.Message)
			}
		})
	}
	// The id is the tenant's own: beta's "taken" is another sandbox.
	s.createBox(keyBeta, "taken", nil)
	s.fail(keyAlpha, "GET", "/v1/sandboxes/"+url.PathEscape("no spaces"), "", http.StatusNotFound, "not_found")

	off := newStack(t, func(o *options) { o.idle = true; o.noSandboxes = true })
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/sandboxes"}, {"GET", "/v1/sandboxes"}, {"GET", "/v1/sandboxes/x"},
		{"GET", "/v1/sandboxes/x/processes/1"}, {"GET", "/v1/sandboxes/x/contexts"},
	} {
		e, _ := off.fail(keyAlpha, c.method, c.path, "", http.StatusNotFound, "not_found")
		if !strings.Contains(e.Message, "not enabled") {
			t.Errorf("%s %s with sandboxes off: %q", c.method, c.path, e.Message)
		}
	}
}

func manyPairs(n int) map[string]string {
	md := map[string]string{}
	for i := range n {
		md[fmt.Sprint("k", i)] = "v"
	}
	return md
}

// TestSandboxMetrics: a new sandbox's readings (one, taken on demand)
// bounded by since and until, as RFC 3339 or unix seconds; bad bounds
// are refused naming the parameter; another tenant's sandbox is not
// found.
func TestSandboxMetrics(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true })
	s.createBox(keyAlpha, "box", nil)
	var m sandbox.SandboxMetrics
	s.call(keyAlpha, "GET", "/v1/sandboxes/box/metrics", "", http.StatusOK, &m)
	if len(m.Metrics) != 1 {
		t.Fatalf("a new sandbox's metrics: %+v, want one reading", m)
	}
	r := m.Metrics[0]
	if r.CPUCores <= 0 || r.MemoryLimitBytes <= 0 || r.DiskLimitBytes <= 0 || r.CPUUsedPct < 0 || r.CPUUsedPct > 100 {
		t.Errorf("reading %+v", r)
	}
	at, sec := r.Timestamp, r.Timestamp.Unix()
	for q, want := range map[string]int{
		"since=" + url.QueryEscape(at.Format(time.RFC3339Nano)):                      1,
		"since=" + url.QueryEscape(at.Add(time.Nanosecond).Format(time.RFC3339Nano)): 0,
		"until=" + url.QueryEscape(at.Format(time.RFC3339Nano)):                      0,
		fmt.Sprintf("since=%d&until=%d", sec, sec+1):                                 1,
		fmt.Sprintf("until=%d", sec):                                                 0,
	} {
		var got sandbox.SandboxMetrics
		s.call(keyAlpha, "GET", "/v1/sandboxes/box/metrics?"+q, "", http.StatusOK, &got)
		if got.Metrics == nil || len(got.Metrics) != want {
			t.Errorf("metrics?%s: %+v, want %d", q, got, want)
		}
	}
	for q, field := range map[string]string{
		"since=yesterday": "since", "until=-5": "until", "since=99999999999999": "since",
		fmt.Sprintf("since=%d&until=%d", sec, sec): "until",
	} {
		e, _ := s.fail(keyAlpha, "GET", "/v1/sandboxes/box/metrics?"+q, "", http.StatusBadRequest, "invalid_request")
		if e.Field != field {
			t.Errorf("metrics?%s: field %q, want %q", q, e.Field, field)
		}
	}
	s.fail(keyBeta, "GET", "/v1/sandboxes/box/metrics", "", http.StatusNotFound, "not_found")
}
