package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzParseMetadata: any filter is read or refused, never a panic, and
// what is read names no empty key.
func FuzzParseMetadata(f *testing.F) {
	for _, s := range []string{"", "a=1&b=2", "a%2520b=c%2526d", "=v", "a=%zz", "a=%25zz", "&&", "a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		md, err := parseMetadata(raw)
		if err != nil {
			return
		}
		if _, ok := md[""]; ok {
			t.Fatalf("parseMetadata(%q) read an empty key", raw)
		}
	})
}

// FuzzHostTarget: a host names a sandbox only as {port}-{id}.{domain},
// with a port in range and an id without dots.
func FuzzHostTarget(f *testing.F) {
	for _, s := range []string{"49983-iabc.sb.test", "49999-iabc.sb.test:443", "x-iabc.sb.test", "0-a.sb.test",
		"70000-a.sb.test", "49983-.sb.test", "49983-a.b.sb.test", "sb.test", "[::1]:80", "49983-A.SB.TEST"} {
		f.Add(s)
	}
	s := New(Config{Domain: "sb.test"})
	f.Fuzz(func(t *testing.T, host string) {
		port, id, ok := s.hostTarget(host)
		if !ok {
			return
		}
		if port < 1 || port > 65535 || id == "" || strings.Contains(id, ".") {
			t.Fatalf("hostTarget(%q) = %d, %q", host, port, id)
		}
	})
}

// FuzzListQuery: any list query is answered or refused with E2B's error,
// never a panic.
func FuzzListQuery(f *testing.F) {
	for _, s := range []string{"", "metadata=a%3D1", "state=running,paused", "state=x", "startedAfter=2026-01-02T03:04:05Z",
		"nextToken=eyJ0IjoiMjAyNi0wMS0wMlQwMzowNDowNVoiLCJpIjoiYSIsIm8iOiJkZXNjIn0", "limit=abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		r := httptest.NewRequest("GET", "/v2/sandboxes", nil)
		r.URL.RawQuery = q
		w := httptest.NewRecorder()
		if _, ok := parseListQuery(w, r); !ok && w.Code != 400 {
			t.Fatalf("query %q refused with %d", q, w.Code)
		}
		if p, err := decodeToken(r.URL.Query().Get("nextToken")); err == nil {
			_ = encodeToken(p)
		}
	})
}

// FuzzMetricsBounds: any start and end of a metrics query are read or
// refused with E2B's 400, never a panic; bounds read are in order.
func FuzzMetricsBounds(f *testing.F) {
	for _, s := range []string{"", "start=1767323045&end=1767323046", "start=5&end=5", "start=6&end=5", "start=-1",
		"end=253402300799", "end=253402300800", "start=1e3", "start=x", "end=%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		r := httptest.NewRequest("GET", "/sandboxes/x/metrics", nil)
		r.URL.RawQuery = q
		w := httptest.NewRecorder()
		since, until, ok := metricsBounds(w, r)
		if !ok {
			errorAnswer(t, q, w)
			if w.Code != 400 {
				t.Fatalf("query %q refused with %d", q, w.Code)
			}
			return
		}
		if !since.IsZero() && !until.IsZero() && !until.After(since) {
			t.Fatalf("%q read as [%v, %v)", q, since, until)
		}
	})
}

// errorAnswer checks that w holds E2B's error answer: a 4xx whose body is
// {"code": status, "message"}.
func errorAnswer(t *testing.T, what string, w *httptest.ResponseRecorder) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("%s: status %d: %s", what, w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != w.Code || e.Message == "" {
		t.Fatalf("%s: %d with body %q, not E2B's error", what, w.Code, w.Body)
	}
}

// FuzzDecodeBody: any body of a control-plane call (create; timeout,
// connect and resume) is read or refused with E2B's 4xx error, never a
// panic or a 5xx; what is read is one JSON value and nothing after it, and
// a timeout read is a duration from 0 up.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{`{"templateID":"base","timeout":300,"metadata":{"k":"v"},"envVars":{"A":"1"},"network":{"allowOut":["x.com"]}}`,
		`{"timeout":60}`, `{}`, ``, `{"timeout":-1}`, `{"timeout":1e400}`, `{"templateID":5}`,
		// The other hostile ones are in testdata/fuzz/FuzzDecodeBody.
		`{"templateID":"` + strings.Repeat("x", 1<<20) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&createBody{}, &timeoutBody{}} {
			w := httptest.NewRecorder()
			if !decode(w, httptest.NewRequest("POST", "/sandboxes", bytes.NewReader(body)), v) {
				errorAnswer(t, fmt.Sprintf("%T from %q", v, body), w)
				continue
			}
			if len(bytes.TrimSpace(body)) != 0 && !json.Valid(body) {
				t.Fatalf("%T: %q is not one JSON value, and is accepted", v, body)
			}
		}
		for _, required := range []bool{false, true} {
			w := httptest.NewRecorder()
			d, ok := readTimeout(w, httptest.NewRequest("POST", "/sandboxes/x/timeout", bytes.NewReader(body)), required)
			if !ok {
				errorAnswer(t, fmt.Sprintf("timeout from %q", body), w)
			} else if d < 0 {
				t.Fatalf("timeout from %q: %v", body, d)
			}
		}
	})
}

// FuzzTokenTenant: an access token names a tenant only in the shape
// newAccessToken makes (a tenant without a dot, a dot, a secret).
func FuzzTokenTenant(f *testing.F) {
	for _, s := range []string{newAccessToken("alpha"), "alpha.", ".x", "alpha", "", "a.b.c", "alpha.\x00",
		"e2b_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		tenant, ok := tokenTenant(token)
		if !ok {
			return
		}
		if tenant == "" || strings.Contains(tenant, ".") || !strings.HasPrefix(token, tenant+".") || len(token) == len(tenant)+1 {
			t.Fatalf("%q names tenant %q", token, tenant)
		}
	})
}
