package e2b

import (
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
