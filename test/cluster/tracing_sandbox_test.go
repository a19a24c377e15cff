package cluster

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/tracing/tracetest"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// traceparent sets a W3C traceparent on every request: the client's
// trace, which the nodes' spans must join.
type traceparent struct {
	value string
	next  http.RoundTripper
}

func (t traceparent) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", t.value)
	return t.next.RoundTrip(r)
}

// TestTraceAcrossNodes (issue 29, done when 3): a call made on node B for
// a live sandbox owned by node A is one trace in an OTLP receiver: the
// client's span, B's server span under it, B's forward under that, A's
// server span under the forward and A's call to the sandbox's agent under
// A's; the error body B relays names the trace, and both nodes' log
// lines for the call carry its id. Readiness probes (which the test
// server's start polls) are not traced.
func TestTraceAcrossNodes(t *testing.T) {
	rc := tracetest.Start(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // export within a tenth of a second
	on := []string{"--tracing-endpoint", rc.URL}
	nodes := startNodes(t, on, on)
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	sb, _, err := client(a, testserver.AlphaKey).CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer,
		TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(t.Context())

	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	cb := sandbox.NewClient(sandbox.Config{Endpoint: b.URL, APIKey: testserver.AlphaKey, Timeout: time.Minute,
		HTTPClient: &http.Client{Transport: traceparent{"00-" + traceID + "-" + clientSpan + "-01", http.DefaultTransport}}})
	if _, err := cb.Sandbox(sb.ID).Files().Write(ctx, "traced.txt", strings.NewReader("through B")); err != nil {
		t.Fatalf("write through B: %v", err)
	}
	// An error answered by A, relayed by B, names the trace.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
		b.URL+"/v1/sandboxes/"+sb.ID+"/files?path="+url.QueryEscape("/workspace/missing.txt"), nil)
	req.Header.Set("Authorization", "Bearer "+testserver.AlphaKey)
	req.Header.Set("traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			TraceID string `json:"trace_id"`
		} `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusNotFound || body.Error.TraceID != traceID {
		t.Errorf("missing file through B: %d %+v, %v; want 404 naming trace %s", resp.StatusCode, body.Error, err, traceID)
	}

	// The SDK hands the trace id on with the error.
	var apiErr *sandbox.APIError
	if err := cb.Sandbox(sb.ID).Files().Read(ctx, "/workspace/missing.txt", io.Discard); !errors.As(err, &apiErr) {
		t.Errorf("the SDK's error for a missing file: %v, want an APIError", err)
	} else if apiErr.TraceID != traceID {
		t.Errorf("the SDK's error for a missing file names trace %q, want %s", apiErr.TraceID, traceID)
	}

	// The write: B's server span, its forward, A's server span, A's agent
	// call, each under the one before.
	const route = "PUT /v1/sandboxes/{id}/files"
	var chain []tracetest.Span
	rc.Wait(t, 30*time.Second, func(spans []tracetest.Span) bool {
		chain = writeChain(rc.Trace(traceID), route)
		return chain != nil
	})
	for i, want := range []struct{ name, node string }{{route, "node-b"}, {"forward", "node-b"}, {route, "node-a"}, {"agent.write_file", "node-a"}} {
		if s := chain[i]; s.Name != want.name || s.Instance != want.node {
			t.Errorf("span %d: %s on %s, want %s on %s", i, s.Name, s.Instance, want.name, want.node)
		}
	}
	if chain[1].Attrs["corral.node"] != "node-a" {
		t.Errorf("forward span names node %q, want node-a", chain[1].Attrs["corral.node"])
	}
	for _, s := range rc.Spans() {
		if s.Name == "GET /readyz" {
			t.Errorf("a readiness probe was traced: %+v", s)
		}
	}
	for _, n := range []*testserver.Server{a, b} {
		if !strings.Contains(n.Log(), "trace_id="+traceID) {
			t.Errorf("no log line of %s names trace %s", n.URL, traceID)
		}
	}
}

// writeChain finds, in one trace's spans, B's server span for route under
// the client's span, B's forward under it, A's server span under that and
// A's agent call under A's; nil until all four arrived.
func writeChain(spans []tracetest.Span, route string) []tracetest.Span {
	byParent := map[string][]tracetest.Span{}
	for _, s := range spans {
		byParent[s.ParentID] = append(byParent[s.ParentID], s)
	}
	child := func(parent, name string) (tracetest.Span, bool) {
		for _, s := range byParent[parent] {
			if s.Name == name {
				return s, true
			}
		}
		return tracetest.Span{}, false
	}
	var chain []tracetest.Span
	parent := "00f067aa0ba902b7"
	for _, name := range []string{route, "forward", route, "agent.write_file"} {
		s, ok := child(parent, name)
		if !ok {
			return nil
		}
		chain, parent = append(chain, s), s.SpanID
	}
	return chain
}
