package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/corralhq/corral/internal/tracing"
	"github.com/corralhq/corral/internal/tracing/tracetest"
)

func TestConfigCheck(t *testing.T) {
	cases := []struct {
		name string
		c    tracing.Config
		want string // in the error; "" for none
	}{
		{"off", tracing.Config{SampleRatio: 1}, ""},
		{"on", tracing.Config{Endpoint: "http://collector:4318", SampleRatio: 0.1, ServiceName: "corral"}, ""},
		{"https with a path", tracing.Config{Endpoint: "https://otlp.example.com/otlp/v1/traces", SampleRatio: 1, ServiceName: "corral"}, ""},
		{"not a URL", tracing.Config{Endpoint: "collector:4318", SampleRatio: 1, ServiceName: "corral"}, "tracing.endpoint"},
		{"grpc scheme", tracing.Config{Endpoint: "grpc://collector:4317", SampleRatio: 1, ServiceName: "corral"}, "tracing.endpoint"},
		{"ratio above one", tracing.Config{SampleRatio: 1.5}, "tracing.sample_ratio"},
		{"negative ratio", tracing.Config{SampleRatio: -0.1}, "tracing.sample_ratio"},
		{"no service", tracing.Config{Endpoint: "http://collector:4318", SampleRatio: 1}, "tracing.service_name"},
	}
	for _, c := range cases {
		err := c.c.Check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
}

// TestOff: without an endpoint Setup installs nothing, and spans started
// cost no context: the one given comes back.
func TestOff(t *testing.T) {
	p, err := tracing.Setup(t.Context(), tracing.Config{SampleRatio: 1}, slog.New(slog.DiscardHandler))
	if err != nil || p != nil {
		t.Fatalf("Setup off: %v, %v", p, err)
	}
	ctx := t.Context()
	if got, span := tracing.Start(ctx, "x"); got != ctx || span.IsRecording() {
		t.Errorf("Start while off made a context or a recording span")
	}
	if id := tracing.TraceID(ctx); id != "" {
		t.Errorf("TraceID outside a trace: %q", id)
	}
}

// TestLogHandler: a line logged with a traced context carries its trace
// and span ids; one without does not.
func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	log.InfoContext(trace.ContextWithSpanContext(t.Context(), sc), "traced", "k", "v")
	log.InfoContext(t.Context(), "untraced")
	log.Info("no context")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var traced map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &traced); err != nil {
		t.Fatal(err)
	}
	if traced["trace_id"] != sc.TraceID().String() || traced["span_id"] != sc.SpanID().String() ||
		traced["k"] != "v" || traced["component"] != "x" {
		t.Errorf("traced line: %s", lines[0])
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, "trace_id") || strings.Contains(l, "span_id") {
			t.Errorf("untraced line names a trace: %s", l)
		}
	}
}

// TestExport: spans made on a server that a traceparent reached join the
// caller's trace, and reach a real OTLP receiver with the node's
// resource; a child made with StartChild follows, none is made outside
// a span. Setup is global: this is the package's one test that turns
// tracing on.
func TestExport(t *testing.T) {
	rc := tracetest.Start(t)
	p, err := tracing.Setup(t.Context(), tracing.Config{Endpoint: rc.URL, SampleRatio: 1, ServiceName: "corral-test", NodeID: "node-x"},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, span := tracing.StartChild(t.Context(), "orphan"); span.IsRecording() {
		t.Error("StartChild outside a span made one")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, span := tracing.StartServer(r, "GET /thing")
		_, child := tracing.StartChild(r.Context(), "child")
		child.End()
		tracing.EndServer(span, http.StatusInternalServerError)
	}))
	defer srv.Close()
	ctx, caller := tracing.Start(t.Context(), "caller")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/thing", nil)
	tracing.Inject(ctx, req.Header)
	if !strings.HasPrefix(req.Header.Get("traceparent"), "00-"+tracing.TraceID(ctx)+"-") {
		t.Fatalf("traceparent %q", req.Header.Get("traceparent"))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	caller.End()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	spans := rc.Trace(tracing.TraceID(ctx))
	byName := map[string]tracetest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	c, s, k := byName["caller"], byName["GET /thing"], byName["child"]
	if len(spans) != 3 || s.ParentID != c.SpanID || k.ParentID != s.SpanID {
		t.Fatalf("spans: %+v", spans)
	}
	if s.Service != "corral-test" || s.Instance != "node-x" || s.Attrs["http.response.status_code"] != "500" || !s.Failed ||
		s.Attrs["http.route"] != "GET /thing" {
		t.Errorf("server span: %+v", s)
	}
}

// BenchmarkServerSpan is what tracing adds to one request: a server span
// continued from a traceparent with a child under it, off and on
// (recording every trace, exporting to a real receiver).
func BenchmarkServerSpan(b *testing.B) {
	run := func(b *testing.B) {
		r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/x/files", nil)
		r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		b.ReportAllocs()
		for b.Loop() {
			r2, span := tracing.StartServer(r, "GET /v1/sandboxes/{id}/files")
			_, child := tracing.StartChild(r2.Context(), "agent.read_file")
			tracing.End(child, nil)
			tracing.EndServer(span, http.StatusOK)
		}
	}
	b.Run("off", run)
	rc := tracetest.Start(b)
	p, err := tracing.Setup(b.Context(), tracing.Config{Endpoint: rc.URL, SampleRatio: 1, ServiceName: "bench"}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	b.Run("on", run)
}
