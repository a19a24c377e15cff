// Package tracetest is a real OTLP/HTTP trace receiver for tests: an HTTP
// server on loopback that decodes what OpenTelemetry exporters post to
// /v1/traces (protobuf) and keeps the spans, flattened, for a test to
// find one trace across the processes that exported to it.
package tracetest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one span received, with its resource's service.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	// Service and Instance are the resource's service.name and
	// service.instance.id (a node's id).
	Service, Instance string
	// Attrs are the span's attributes, as strings.
	Attrs map[string]string
	// Failed is set when the span's status is an error.
	Failed bool
}

// Receiver keeps the spans posted to URL. It is safe for concurrent use.
type Receiver struct {
	// URL is the endpoint to export to (tracing.endpoint).
	URL string

	mu    sync.Mutex
	spans []Span
	// posts counts the requests decoded.
	posts int
}

// Start starts a receiver, closed when t ends.
func Start(t testing.TB) *Receiver {
	rc := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(),
					Service: res["service.name"], Instance: res["service.instance.id"], Attrs: attrs(s.GetAttributes()),
					Failed: s.GetStatus().GetCode() == 2})
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.posts++
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		default:
			m[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (rc *Receiver) Spans() []Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.spans)
}

// Trace returns the spans of trace id received so far.
func (rc *Receiver) Trace(id string) []Span {
	var out []Span
	for _, s := range rc.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// Wait polls until ok holds for the spans received, for up to timeout, and
// returns them; the test fails if it never does.
func (rc *Receiver) Wait(t testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := rc.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver never got the spans wanted; it has %d: %+v", len(spans), spans)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
