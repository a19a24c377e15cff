// Package openapi checks api/openapi.yaml (OpenAPI 3.1) against a real corral
// serve: the document is valid, it names every route the server registers,
// and every response of every operation, errors, 202 and the event stream
// included, matches it (kin-openapi, JSON Schema 2020-12).
package openapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// checker sends requests to a server and validates each exchange.
type checker struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	url    string
	// seen records "METHOD /template STATUS" per exchange.
	seen map[string]bool
}

type call struct {
	method, path string
	key          string
	body         []byte
	header       http.Header
	// invalid requests are sent on purpose: only the response is checked.
	invalid bool
	want    int
	// headers, if set, is called once the answer's headers have come,
	// before its body is read (a stream that ends on an event it causes).
	headers func()
}

func (c *checker) do(cl call) []byte {
	c.t.Helper()
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequest(cl.method, c.url+cl.path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if cl.body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.key != "" {
		req.Header.Set("Authorization", "Bearer "+cl.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", cl.method, cl.path, err)
	}
	if cl.headers != nil {
		cl.headers()
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if cl.want != 0 && resp.StatusCode != cl.want {
		c.t.Fatalf("%s %s: %d %s, want %d", cl.method, cl.path, resp.StatusCode, raw, cl.want)
	}

	// Route with a fresh request carrying the same body (the first was consumed).
	vreq, _ := http.NewRequest(cl.method, c.url+cl.path, bytes.NewReader(cl.body))
	vreq.Header = req.Header.Clone()
	route, params, err := c.findRoute(vreq)
	if err != nil {
		c.t.Errorf("%s %s: no operation in the spec: %v", cl.method, cl.path, err)
		return raw
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true,
		MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	if !cl.invalid {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			c.t.Errorf("%s %s: the request does not match the spec: %v", cl.method, cl.path, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Options: opts}
	out.SetBodyBytes(raw)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("%s %s → %d: the response does not match the spec: %v\n%s", cl.method, cl.path, resp.StatusCode, err, clip(raw))
	}
	c.seen[fmt.Sprintf("%s %s %d", cl.method, route.Path, resp.StatusCode)] = true
	return raw
}

// greedy are templates whose last parameter may hold "/", which OpenAPI
// path parameters cannot express; the router matches one segment only.
var greedy = []struct{ prefix, template, param string }{
	{"/v1/blobs/", "/v1/blobs/{key}", "key"},
}

// findRoute routes a request, matching greedy templates itself.
func (c *checker) findRoute(r *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := c.router.FindRoute(r)
	if err == nil {
		return route, params, nil
	}
	for _, g := range greedy {
		if rest, ok := strings.CutPrefix(r.URL.Path, g.prefix); ok && rest != "" {
			item := c.doc.Paths.Find(g.template)
			op := item.GetOperation(r.Method)
			if op == nil {
				break
			}
			return &routers.Route{Spec: c.doc, Server: c.doc.Servers[0], Path: g.template, PathItem: item, Method: r.Method, Operation: op},
				map[string]string{g.param: rest}, nil
		}
	}
	if m := sessionFile.FindStringSubmatch(r.URL.Path); m != nil {
		item := c.doc.Paths.Find("/v1/sessions/{id}/files/{path}")
		if op := item.GetOperation(r.Method); op != nil {
			return &routers.Route{Spec: c.doc, Server: c.doc.Servers[0], Path: "/v1/sessions/{id}/files/{path}", PathItem: item,
				Method: r.Method, Operation: op}, map[string]string{"id": m[1], "path": m[2]}, nil
		}
	}
	return nil, nil, err
}

var sessionFile = regexp.MustCompile(`^/v1/sessions/([^/]+)/files/(.+)$`)

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// validateSchema checks a JSON value against a named component schema.
func (c *checker) validateSchema(name string, data string) {
	c.t.Helper()
	s := c.doc.Components.Schemas[name]
	if s == nil {
		c.t.Fatalf("no schema %s", name)
	}
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		c.t.Errorf("%s: not JSON: %v", name, err)
		return
	}
	if err := s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%s does not match %q: %v", name, clip([]byte(data)), err)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestResponsesMatchSpec(t *testing.T) {
	doc := loadSpec(t)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	srv := testserver.Start(t, testserver.Options{})
	// Its audit trail off: GET /v1/audit is 404 there.
	small := testserver.Start(t, testserver.Options{Extra: []string{"--max-concurrency", "1", "--queue-bound", "1", "--audit-enabled=false"}})
	// A server whose runsc is still being built.
	build := testserver.NewRunscBuild(t)
	build.Start()
	building := testserver.Start(t, testserver.Options{Extra: build.Flags, NoPool: true})
	// Two nodes on PostgreSQL and Redis, for a session whose node dies.
	storeURL, stateURL := testenv.Postgres(t), testenv.Redis(t)
	clusterCfg := "\n[cluster]\nheartbeat = \"200ms\"\nlost_after = \"2s\"\n"
	nodeA := testserver.Start(t, testserver.Options{Store: storeURL, State: stateURL, NoPool: true, Config: clusterCfg, Extra: []string{"--node-id", "a"}})
	nodeB := testserver.Start(t, testserver.Options{Store: storeURL, State: stateURL, NoPool: true, Config: clusterCfg, Extra: []string{"--node-id", "b"}})
	// Route every server's requests with the same document.
	doc.Servers = openapi3.Servers{{URL: srv.URL}, {URL: small.URL}, {URL: building.URL}, {URL: nodeA.URL}, {URL: nodeB.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{t: t, doc: doc, router: router, url: srv.URL, seen: map[string]bool{}}
	key := testserver.AlphaKey

	// POST /v1/executions
	var rec sandbox.Result
	raw := c.do(call{method: "POST", path: "/v1/executions?wait=true", key: key, want: 200,
		body: mustJSON(sandbox.ExecuteRequest{Language: "python", Code: "print(sum(range(100)))",
			Limits: sandbox.Limits{TimeoutMS: 10000, MemoryMB: 256}})})
	json.Unmarshal(raw, &rec)
	failed := c.do(call{method: "POST", path: "/v1/executions?wait=1", key: key, want: 200,
		body: mustJSON(sandbox.ExecuteRequest{SessionID: "spec", Language: "bash", Code: "echo out; echo err >&2; exit 3"})})
	if !strings.Contains(string(failed), `"runtime_error"`) {
		t.Errorf("failed execution: %s", failed)
	}
	// A success that met the disk limit: limits_hit is in the record.
	recovered := c.do(call{method: "POST", path: "/v1/executions?wait=true", key: key, want: 200,
		body: mustJSON(sandbox.ExecuteRequest{Language: "bash", Code: "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; echo done",
			Limits: sandbox.Limits{DiskMB: 16}})})
	if !strings.Contains(string(recovered), `"limits_hit":[{"limit":"disk"`) {
		t.Errorf("a success that filled the disk: %s", clip(recovered))
	}
	id := sandbox.NewExecutionID()
	c.do(call{method: "POST", path: "/v1/executions", key: key, want: 202,
		body: mustJSON(sandbox.ExecuteRequest{ExecutionID: id, Language: "bash", Code: "echo started; sleep 30"})})
	c.do(call{method: "POST", path: "/v1/executions", key: key, want: 409,
		body: mustJSON(sandbox.ExecuteRequest{ExecutionID: id, Language: "bash", Code: "echo other"})})
	c.do(call{method: "POST", path: "/v1/executions", key: key, want: 400,
		body: mustJSON(sandbox.ExecuteRequest{Language: "cobol", Code: "x"})})
	c.do(call{method: "POST", path: "/v1/executions", key: key, want: 400, invalid: true, body: []byte(`{"language":`)})
	c.do(call{method: "POST", path: "/v1/executions", key: key, want: 400, invalid: true,
		body: []byte(`{"language":"python","limits":{"memory_mb":"lots"}}`)})
	c.do(call{method: "POST", path: "/v1/executions", key: "", want: 401, invalid: true,
		body: mustJSON(sandbox.ExecuteRequest{Language: "python"})})
	c.do(call{method: "POST", path: "/v1/executions", key: key, want: 413, invalid: true,
		body: mustJSON(sandbox.ExecuteRequest{Language: "python", Code: strings.Repeat("#", 11<<20)})})

	// GET /v1/executions
	c.do(call{method: "GET", path: "/v1/executions", key: key, want: 200})
	page := c.do(call{method: "GET", path: "/v1/executions?session_id=spec&status=failed&error_type=runtime_error&language=bash" +
		"&exit_code_ne=0&sort=-duration_ms&limit=5&since=2020-01-01T00:00:00Z&until=2100-01-01T00:00:00Z", key: key, want: 200})
	if !strings.Contains(string(page), `"executions":[{`) {
		t.Errorf("filtered page is empty: %s", page)
	}
	withCursor := c.do(call{method: "GET", path: "/v1/executions?limit=1", key: key, want: 200})
	if !strings.Contains(string(withCursor), "next_cursor") {
		t.Errorf("no next_cursor: %s", withCursor)
	}
	c.do(call{method: "GET", path: "/v1/executions?sort=name", key: key, want: 400, invalid: true})
	c.do(call{method: "GET", path: "/v1/executions", key: "wrong", want: 401})

	// GET /v1/executions/{id}
	c.do(call{method: "GET", path: "/v1/executions/" + rec.ExecutionID, key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/executions/no-such-id", key: key, want: 404})
	c.do(call{method: "GET", path: "/v1/executions/" + rec.ExecutionID, key: testserver.BetaKey, want: 404})
	c.do(call{method: "GET", path: "/v1/executions/" + rec.ExecutionID, want: 401})

	// GET /v1/executions/{id}/events, while it runs and after.
	c.checkEvents(id, key)
	c.do(call{method: "GET", path: "/v1/executions/" + id + "/events", key: key, want: 400, invalid: true,
		header: http.Header{"Last-Event-Id": {"x"}}})
	c.do(call{method: "GET", path: "/v1/executions/no-such-id/events", key: key, want: 404})
	c.do(call{method: "GET", path: "/v1/executions/" + id + "/events", want: 401})

	// POST /v1/executions/{id}/cancel: running, then finished.
	c.do(call{method: "POST", path: "/v1/executions/" + id + "/cancel", key: key, want: 200})
	c.do(call{method: "POST", path: "/v1/executions/" + id + "/cancel", key: key, want: 200})
	c.do(call{method: "POST", path: "/v1/executions/no-such-id/cancel", key: key, want: 404})
	c.do(call{method: "POST", path: "/v1/executions/" + id + "/cancel", want: 401})
	// A finished stream: its events, then done.
	c.checkEvents(rec.ExecutionID, key)

	// GET /v1/stats
	c.do(call{method: "GET", path: "/v1/stats?window=24h", key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/stats?window=1s", key: key, want: 400})
	c.do(call{method: "GET", path: "/v1/stats", want: 401})

	c.sessionsAndFiles(srv, rec.ExecutionID)
	c.liveSandboxes(key)

	// GET /v1/audit: what the calls above did (written in batches: the
	// first answer may come before them, and is an answer all the same).
	c.do(call{method: "GET", path: "/v1/audit?limit=5&action=process.start", key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/audit?limit=0", key: key, want: 400, invalid: true})
	c.do(call{method: "GET", path: "/v1/audit", want: 401})

	// Operations.
	c.do(call{method: "GET", path: "/healthz", want: 200})
	c.do(call{method: "GET", path: "/readyz", want: 200})
	metrics := c.do(call{method: "GET", path: "/metrics", want: 200})
	if !strings.Contains(string(metrics), "corral_http_requests_total") {
		t.Errorf("metrics: %s", clip(metrics))
	}

	// 429 from a server with a queue of one.
	c.url = small.URL
	c.do(call{method: "GET", path: "/v1/audit", key: key, want: 404})
	got429 := false
	var queued []string
	for i := 0; i < 10 && !got429; i++ {
		body := mustJSON(sandbox.ExecuteRequest{Language: "bash", Code: "sleep 5"})
		raw := c.do(call{method: "POST", path: "/v1/executions", key: key, body: body})
		var sub sandbox.Submitted
		if json.Unmarshal(raw, &sub) == nil && sub.ExecutionID != "" {
			queued = append(queued, sub.ExecutionID)
		}
		got429 = c.seen["POST /v1/executions 429"]
	}
	if !got429 {
		t.Error("no 429 from a server with a queue of one")
	}
	for _, q := range queued {
		c.do(call{method: "POST", path: "/v1/executions/" + q + "/cancel", key: key, want: 200})
	}

	// 503 tier_unavailable while gVisor is being installed.
	c.url = building.URL
	c.do(call{method: "POST", path: "/v1/executions", key: key, want: 503,
		body: mustJSON(sandbox.ExecuteRequest{Language: "python", Code: "print(1)", Isolation: sandbox.IsolationGVisor})})

	// 503 and 410 for a session whose node died.
	c.lostSession(key, nodeA, nodeB)

	// Every operation and every response the spec documents was seen,
	// except what a healthy server cannot be made to answer.
	unprovokable := map[string]bool{"500": true, "GET /readyz 503": true}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				k := fmt.Sprintf("%s %s %s", method, path, status)
				if unprovokable[status] || unprovokable[k] {
					continue
				}
				if !c.seen[k] {
					t.Errorf("never exercised: %s", k)
				}
			}
		}
	}
	var seen []string
	for k := range c.seen {
		seen = append(seen, k)
	}
	slices.Sort(seen)
	t.Logf("exercised and validated:\n  %s", strings.Join(seen, "\n  "))
}

// lostSession asks a node for a session held by a node that was killed:
// every session call answers 503 session_unavailable at once, then 410
// session_lost once the node is lost (deleting it then succeeds).
func (c *checker) lostSession(key string, a, b *testserver.Server) {
	c.url = a.URL
	c.do(call{method: "PUT", path: "/v1/sessions/gone", key: key, want: 201})
	a.Kill()
	c.url = b.URL
	exec := mustJSON(sandbox.ExecuteRequest{SessionID: "gone", Language: "bash", Code: "true"})
	calls := func(want int) {
		c.do(call{method: "GET", path: "/v1/sessions/gone", key: key, want: want})
		c.do(call{method: "PUT", path: "/v1/sessions/gone", key: key, want: want})
		c.do(call{method: "POST", path: "/v1/sessions/gone", key: key, want: want})
		c.do(call{method: "GET", path: "/v1/sessions/gone/files/", key: key, want: want})
		c.do(call{method: "GET", path: "/v1/sessions/gone/files/a.txt", key: key, want: want})
		c.do(call{method: "PUT", path: "/v1/sessions/gone/files/a.txt", key: key, want: want, body: []byte("x"),
			header: http.Header{"Content-Type": {"application/octet-stream"}}})
		c.do(call{method: "DELETE", path: "/v1/sessions/gone/files/a.txt", key: key, want: want})
		c.do(call{method: "POST", path: "/v1/executions", key: key, want: want, body: exec})
	}
	calls(503)
	c.do(call{method: "DELETE", path: "/v1/sessions/gone", key: key, want: 503})
	lost := testenv.Eventually(c.t, 30*time.Second, func() bool {
		req, _ := http.NewRequest("GET", b.URL+"/v1/sessions/gone", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusGone
	})
	if !lost {
		c.t.Fatal("the killed node's session was never lost")
	}
	calls(410)
	c.do(call{method: "DELETE", path: "/v1/sessions/gone", key: key, want: 204})
	// A comes back and reaps what its killed process left.
	a.Launch()
}

// checkEvents reads an execution's event stream: the response is checked
// against the spec (status, content type, headers) and each event's data
// against its schema.
func (c *checker) checkEvents(id, key string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 60*time.Second)
	defer cancel()
	path := "/v1/executions/" + id + "/events"
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		c.t.Fatalf("events: %d %q", resp.StatusCode, ct)
	}
	// A running execution's stream ends only with done: read the first
	// events, then stop (the rest is read after the cancel).
	var raw bytes.Buffer
	sc := bufio.NewScanner(io.TeeReader(resp.Body, &raw))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var event, data string
	n := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "" && event != "":
			n++
			switch event {
			case "stdout", "stderr":
				c.validateSchema("OutputEventData", data)
			case "status":
				c.validateSchema("StatusEventData", data)
			case "notice":
				c.validateSchema("NoticeEventData", data)
			case "done":
				c.validateSchema("Execution", data)
			default:
				c.t.Errorf("event type %q is not in the spec", event)
			}
			if event == "done" || event == "stdout" && strings.Contains(data, "started") {
				goto validated
			}
			event, data = "", ""
		}
	}
validated:
	if n == 0 {
		c.t.Errorf("no events for %s", id)
	}
	vreq, _ := http.NewRequest("GET", c.url+path, nil)
	vreq.Header = req.Header.Clone()
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		c.t.Fatal(err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	out.SetBodyBytes(raw.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("events: the response does not match the spec: %v", err)
	}
	c.seen["GET "+route.Path+" 200"] = true
}

// sessionsAndFiles exercises the session, file, egress and artifact
// endpoints, every documented status included.
func (c *checker) sessionsAndFiles(srv *testserver.Server, executionID string) {
	key := testserver.AlphaKey
	octet := http.Header{"Content-Type": {"application/octet-stream"}}

	// GET /v1/executions/{id}/egress
	c.do(call{method: "GET", path: "/v1/executions/" + executionID + "/egress", key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/executions/no-such-id/egress", key: key, want: 404})
	c.do(call{method: "GET", path: "/v1/executions/" + executionID + "/egress", want: 401})

	// /v1/sessions/{id}
	sess := "spec-session"
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess, key: key, want: 201, body: []byte(`{"ttl_seconds":600}`)})
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess, key: key, want: 200})
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess, key: key, want: 400, invalid: true, body: []byte(`{"ttl_seconds":99999999}`)})
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess, want: 401})
	c.do(call{method: "POST", path: "/v1/sessions/" + sess + "-post", key: key, want: 201})
	c.do(call{method: "POST", path: "/v1/sessions/" + sess + "-post", key: key, want: 200})
	c.do(call{method: "POST", path: "/v1/sessions/" + sess + "-post", key: key, want: 400, invalid: true, body: []byte(`{"colour":"blue"}`)})
	c.do(call{method: "POST", path: "/v1/sessions/" + sess + "-post", want: 401})
	c.do(call{method: "GET", path: "/v1/sessions/" + sess, key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/sessions/no-such-session", key: key, want: 404})
	c.do(call{method: "GET", path: "/v1/sessions/" + sess, want: 401})

	// Files.
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess + "/files/notes.txt", key: key, want: 204, header: octet, body: []byte("hello")})
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess + "/files/sub/deep.txt", key: key, want: 204, header: octet, body: []byte("deep")})
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess + "/files/%2e%2e/x", key: key, want: 400, header: octet, body: []byte("x")})
	c.do(call{method: "PUT", path: "/v1/sessions/" + sess + "/files/x", want: 401, header: octet, body: []byte("x")})
	small := "spec-small"
	c.do(call{method: "PUT", path: "/v1/sessions/" + small, key: key, want: 201, body: []byte(`{"disk_mb":16}`)})
	c.do(call{method: "PUT", path: "/v1/sessions/" + small + "/files/big.bin", key: key, want: 413, header: octet,
		body: bytes.Repeat([]byte("x"), 24<<20)})
	c.do(call{method: "GET", path: "/v1/sessions/" + sess + "/files/", key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/sessions/no-such-session/files/", key: key, want: 404})
	c.do(call{method: "GET", path: "/v1/sessions/" + sess + "/files/", want: 401})
	if b := c.do(call{method: "GET", path: "/v1/sessions/" + sess + "/files/notes.txt", key: key, want: 200}); string(b) != "hello" {
		c.t.Errorf("downloaded %q", b)
	}
	c.do(call{method: "GET", path: "/v1/sessions/" + sess + "/files/sub", key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/sessions/" + sess + "/files/missing.txt", key: key, want: 404})
	c.do(call{method: "GET", path: "/v1/sessions/" + sess + "/files/%2e%2e/etc", key: key, want: 400})
	c.do(call{method: "GET", path: "/v1/sessions/" + sess + "/files/notes.txt", want: 401})
	c.do(call{method: "DELETE", path: "/v1/sessions/" + sess + "/files/sub", key: key, want: 204})
	c.do(call{method: "DELETE", path: "/v1/sessions/" + sess + "/files/%2e%2e", key: key, want: 400})
	c.do(call{method: "DELETE", path: "/v1/sessions/no-such-session/files/x", key: key, want: 404})
	c.do(call{method: "DELETE", path: "/v1/sessions/" + sess + "/files/x", want: 401})
	c.do(call{method: "DELETE", path: "/v1/sessions/" + sess, key: key, want: 204})
	c.do(call{method: "DELETE", path: "/v1/sessions/" + sess, key: key, want: 404})
	c.do(call{method: "DELETE", path: "/v1/sessions/" + small, want: 401})

	// /v1/blobs/{key}: an artifact's link, tampered, and one to nothing.
	var rec sandbox.Result
	raw := c.do(call{method: "POST", path: "/v1/executions?wait=true", key: key, want: 200,
		body: mustJSON(sandbox.ExecuteRequest{Language: "bash", Code: "mkdir -p /workspace/output && echo art > /workspace/output/a.txt"})})
	json.Unmarshal(raw, &rec)
	if len(rec.Artifacts) != 1 {
		c.t.Fatalf("artifacts %s", raw)
	}
	link := strings.TrimPrefix(rec.Artifacts[0].URL, srv.URL)
	if b := c.do(call{method: "GET", path: link, want: 200}); string(b) != "art\n" {
		c.t.Errorf("artifact %q", b)
	}
	c.do(call{method: "HEAD", path: link, want: 200})
	tampered := strings.Replace(link, "a.txt", "b.txt", 1)
	c.do(call{method: "GET", path: tampered, want: 403})
	c.do(call{method: "HEAD", path: tampered, want: 403})
	missing := signBlob(c.t, srv, "alpha/executions/none/output/gone.txt")
	c.do(call{method: "GET", path: missing, want: 404})
	c.do(call{method: "HEAD", path: missing, want: 404})
}

// signBlob makes a valid link to key with the server's own secret (the
// local blob store keeps it in its directory).
func signBlob(t *testing.T, srv *testserver.Server, key string) string {
	secret, err := os.ReadFile(filepath.Join(srv.Data, "blobs", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	expires := fmt.Sprint(time.Now().Add(time.Hour).Unix())
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key + "\n" + expires))
	return "/v1/blobs/" + key + "?expires=" + expires + "&sig=" + hex.EncodeToString(m.Sum(nil))
}
