package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/sandbox"
)

// bodies are the JSON request bodies /v1 reads with decodeBody, one per
// request type: the sandbox's, a process's, a PTY size, a code context's
// and a cell's, and the shapes the handlers declare in place (timeout,
// signal, mkdir, move; kept the same as theirs).
var bodies = []func() any{
	func() any { return &sandbox.CreateSandboxRequest{} },
	func() any { return &sandbox.StartProcessRequest{} },
	func() any { return &sandbox.PTYSize{} },
	func() any { return &sandbox.ContextRequest{} },
	func() any { return &sandbox.RunCodeRequest{} },
	func() any {
		return &struct {
			TimeoutSeconds int64 `json:"timeout_seconds"`
		}{}
	},
	func() any {
		return &struct {
			Signal json.RawMessage `json:"signal"`
		}{}
	},
	func() any {
		return &struct {
			Path    string `json:"path"`
			Parents bool   `json:"parents"`
		}{}
	},
	func() any {
		return &struct {
			From string `json:"from"`
			To   string `json:"to"`
		}{}
	},
}

// FuzzDecodeBody: any body decodes into every /v1 request type or is
// refused with a 4xx, never a panic or a 5xx; what is accepted is one JSON
// value and nothing after it (or no body at all); what decodes encodes and
// decodes again as the same value.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"sandbox_id":"a","tier":"container","timeout_seconds":600,"limits":{"disk_mb":32},"metadata":{"k":"v"}}`,
		`{"cmd":["cat"],"stdin":true,"tag":"t","env":{"A":"1"},"cwd":"/workspace","pty":{"cols":80,"rows":24}}`,
		`{"shell":"echo hi"}`, `{"cols":120,"rows":40}`, `{"language":"python","cwd":"/tmp","env":{"A":"b"}}`,
		`{"code":"print(1)","timeout_seconds":5}`, `{"timeout_seconds":900}`, `{"signal":"SIGTERM"}`, `{"signal":15}`,
		`{"path":"m/n","parents":true}`, `{"from":"a","to":"/workspace/b"}`,
		``, `null`, `[`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range bodies {
			v := mk()
			if e := decodeBody(httptest.NewRequest("POST", "/", bytes.NewReader(body)), v); e != nil {
				if e.Status < 400 || e.Status > 499 {
					t.Fatalf("%T from %q: status %d (%s)", v, body, e.Status, e.Code)
				}
				continue
			}
			if len(bytes.TrimSpace(body)) != 0 && !json.Valid(body) {
				t.Fatalf("%T: %q is not one JSON value, and is accepted", v, body)
			}
			out, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%T decoded from %q does not encode: %v", v, body, err)
			}
			again := mk()
			if e := decodeBody(httptest.NewRequest("POST", "/", bytes.NewReader(out)), again); e != nil {
				t.Fatalf("%T: its own encoding %s is refused: %v", v, out, e)
			}
			if back, _ := json.Marshal(again); !bytes.Equal(out, back) {
				t.Fatalf("%T: %s became %s", v, out, back)
			}
		}
	})
}

// decodeBody is Server.decode's verdict on a body: nil, or the error /v1
// would answer.
func decodeBody(r *http.Request, v any) *Error {
	if err := httpbody.ReadJSON(httptest.NewRecorder(), r, httpbody.MaxJSON, v, rules); err != nil {
		return asError(r.Context(), err, slog.New(slog.DiscardHandler))
	}
	return nil
}

// FuzzParseQuery: any query of GET /v1/executions is read or refused with
// a 400 naming its field, never a panic; what is read is within the
// bounds parseQuery promises.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "session_id=s1&status=failed&error_type=timeout&language=python&sort=-duration_ms",
		"exit_code_ne=0&limit=10&since=2026-01-02T03:04:05Z&until=2026-01-02T03:04:05.5Z", "limit=0", "limit=1001",
		"since=yesterday", "cursor=%zz", "sort=name"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/executions", nil)
		r.URL.RawQuery = raw
		q, e := parseQuery(r)
		if e != nil {
			if e.Status != http.StatusBadRequest || e.Field == "" {
				t.Fatalf("%q: %d field %q", raw, e.Status, e.Field)
			}
			return
		}
		if q.Limit < 0 || q.Limit > 1000 || len(q.Cursor) > 512 || len(q.Language) > 64 {
			t.Fatalf("%q read as %+v", raw, q)
		}
	})
}

// FuzzMetadataFilter: any metadata filter of GET /v1/sandboxes is read or
// refused with a 400, never a panic; a filter read names no empty key
// given as metadata=KEY=VALUE.
func FuzzMetadataFilter(f *testing.F) {
	for _, s := range []string{"metadata.suite=openapi", "metadata=suite%3Dopenapi", "metadata=broken",
		"metadata=%3Dv", "metadata=a%3D1%26b%3D2", "metadata.=x", "metadata=a%3D%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
		r.URL.RawQuery = raw
		if _, e := metadataFilter(r); e != nil && e.Status != http.StatusBadRequest {
			t.Fatalf("%q: %d", raw, e.Status)
		}
	})
}

// FuzzLastEventID: where a client resumes a stream is a number or a 400,
// from the header or the query alike.
func FuzzLastEventID(f *testing.F) {
	for _, s := range []string{"", "0", "42", " 7 ", "-1", "18446744073709551616", "x", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Last-Event-Id"] = []string{raw}
		n, e := lastEventID(r)
		if e != nil && e.Status != http.StatusBadRequest {
			t.Fatalf("%q: %d", raw, e.Status)
		}
		q := httptest.NewRequest("GET", "/", nil)
		q.URL.RawQuery = "last_event_id=" + url.QueryEscape(raw)
		m, qe := lastEventID(q)
		if (e == nil) != (qe == nil) || n != m {
			t.Fatalf("%q: header %d %v, query %d %v", raw, n, e, m, qe)
		}
	})
}

// FuzzMetricsBounds: any since and until of a sandbox's metrics are read
// or refused with a 400 naming one of them, never a panic; bounds read
// are in order.
func FuzzMetricsBounds(f *testing.F) {
	for _, s := range []string{"", "since=2026-01-02T03:04:05Z&until=1767323046", "since=0", "until=253402300799",
		"until=253402300800", "since=-1", "since=yesterday", "since=5&until=5", "since=1e3", "until=%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/sandboxes/x/metrics", nil)
		r.URL.RawQuery = raw
		since, until, e := metricsBounds(r)
		if e != nil {
			if e.Status != http.StatusBadRequest || (e.Field != "since" && e.Field != "until") {
				t.Fatalf("%q: %d field %q", raw, e.Status, e.Field)
			}
			return
		}
		if !since.IsZero() && !until.IsZero() && !until.After(since) {
			t.Fatalf("%q read as [%v, %v)", raw, since, until)
		}
	})
}
