package mcp

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
	"github.com/google/go-cmp/cmp"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// deadEndpoint returns the URL of a port nothing listens on: any call that
// reaches for the Corral server fails as unreachable.
func deadEndpoint(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// connect serves a Server for endpoint in memory and returns a client
// session of the go-sdk's own client.
func connect(t *testing.T, endpoint string) *gomcp.ClientSession {
	t.Helper()
	srv := New(sandbox.NewClient(sandbox.Config{Endpoint: endpoint, APIKey: "k"}), Options{Endpoint: endpoint})
	st, ct := gomcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := gomcp.NewClient(&gomcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestToolsAndSchemas(t *testing.T) {
	cs := connect(t, deadEndpoint(t))
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	required := map[string][]string{
		ToolRunCode:         {"code", "language"},
		ToolGetExecution:    {"execution_id"},
		ToolListFiles:       {"session_id"},
		ToolReadFile:        {"path", "session_id"},
		ToolWriteFile:       {"path", "session_id"},
		ToolCreateSandbox:   nil,
		ToolRunCell:         {"code"},
		ToolForkContext:     {"context_id", "sandbox_id"},
		ToolCloseSandbox:    {"sandbox_id"},
		ToolSnapshotSandbox: {"sandbox_id"},
		ToolForkSandbox:     {"sandbox_id"},
	}
	got := map[string][]string{}
	for _, tool := range res.Tools {
		var in struct {
			Type       string                     `json:"type"`
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &in); err != nil {
			t.Fatal(err)
		}
		slices.Sort(in.Required)
		got[tool.Name] = in.Required
		if in.Type != "object" || len(tool.Description) < 40 || tool.OutputSchema == nil || tool.Annotations == nil {
			t.Errorf("%s: type %q, description %q, output schema %v, annotations %v", tool.Name, in.Type, tool.Description, tool.OutputSchema, tool.Annotations)
		}
		// Every argument tells the model what it is for.
		for name, p := range in.Properties {
			var prop struct{ Description string }
			json.Unmarshal(p, &prop)
			if prop.Description == "" {
				t.Errorf("%s.%s has no description", tool.Name, name)
			}
		}
	}
	if diff := cmp.Diff(required, got); diff != "" {
		t.Errorf("tools and required arguments (-want +got):\n%s", diff)
	}
	if !strings.Contains(cs.InitializeResult().Instructions, "session_id") {
		t.Errorf("instructions: %q", cs.InitializeResult().Instructions)
	}
}

// toolErr returns the text and the error data of a tool error; it fails
// the test for a protocol error or a result without isError.
func toolErr(t *testing.T, res *gomcp.CallToolResult, err error) (string, errorData) {
	t.Helper()
	if err != nil {
		t.Fatalf("want a tool error, got the protocol error %v", err)
	}
	if !res.IsError || len(res.Content) != 1 || res.StructuredContent != nil {
		t.Fatalf("want a tool error with one text and no record, got isError %v, %d contents, structured %v", res.IsError, len(res.Content), res.StructuredContent)
	}
	text, ok := res.Content[0].(*gomcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	var data errorData
	b, _ := json.Marshal(res.Meta[MetaError])
	if err := json.Unmarshal(b, &data); err != nil || data.Reason == "" {
		t.Fatalf("_meta %v: %v", res.Meta, err)
	}
	return text.Text, data
}

// Bad arguments are tool errors (SEP-1303: the model reads them and
// corrects the call) that name the argument, and never reach the Corral
// server: it does not exist here, so a call that reached for it would fail
// as unreachable instead.
func TestInvalidArguments(t *testing.T) {
	cs := connect(t, deadEndpoint(t))
	for _, c := range []struct {
		tool  string
		args  string
		field string
		want  string
	}{
		{ToolRunCode, `{}`, "", "language"},
		{ToolRunCode, `{"language":"python"}`, "", "code"},
		{ToolRunCode, `{"language":"","code":"print(1)"}`, "language", "minLength"},
		{ToolRunCode, `{"language":"python","code":"x","timeout":5}`, "", "timeout"},
		{ToolRunCode, `{"language":"python","code":"x","limits":{"cpu_cores":0.25,"memory_mb":0.5}}`, "limits.memory_mb", "integer"},
		{ToolRunCode, `{"language":"python","code":"x","limits":{"cpu_cores":-0.5}}`, "limits.cpu_cores", "exclusiveMinimum: -0.5 is less than or equal to 0"},
		{ToolRunCode, `{"language":"python","code":"x","limits":{"memory_mb":-1}}`, "limits.memory_mb", "exclusiveMinimum: -1 is less than or equal to 0"},
		{ToolRunCode, `{"language":"python","code":"x","files":[{"path":"","content":"x"}]}`, "files[].path", "minLength"},
		{ToolRunCode, `{"language":"python","code":1}`, "code", "string"},
		{ToolRunCode, `{"language":"python","code":"x","files":[{"path":"a","content":"1","url":"https://example.com/a"}]}`, "files[0]", "exactly one"},
		{ToolRunCode, `{"language":"python","code":"x","files":[{"path":"a"}]}`, "files[0]", "exactly one"},
		{ToolRunCode, `{"language":"python","code":"x","files":[{"path":"a","content_base64":"!!"}]}`, "files[0].content_base64", "base64"},
		{ToolGetExecution, `{"execution_id":""}`, "execution_id", "minLength"},
		{ToolListFiles, `{}`, "", "session_id"},
		{ToolReadFile, `{"session_id":"s","path":"a","max_bytes":0}`, "max_bytes", "minimum: 0 is less than 1"},
		{ToolReadFile, `{"session_id":"s","path":"a","max_bytes":2000000}`, "max_bytes", "maximum: 2000000 is greater than 1048576"},
		{ToolWriteFile, `{"session_id":"s","path":"a"}`, "", "exactly one"},
		{ToolWriteFile, `{"session_id":"s","path":"a","content":"x","content_base64":"eA=="}`, "", "exactly one"},
		{ToolWriteFile, `{"session_id":"s","path":"a","content_base64":"%%"}`, "content_base64", "base64"},
		{ToolCreateSandbox, `{"timeout_seconds":0}`, "timeout_seconds", "exclusiveMinimum"},
		{ToolCreateSandbox, `{"cpus":-1}`, "cpus", "exclusiveMinimum"},
		{ToolCreateSandbox, `{"cpu_cores":0}`, "cpu_cores", "exclusiveMinimum"},
		{ToolCreateSandbox, `{"tier":"kvm"}`, "tier", "enum"},
		{ToolRunCell, `{}`, "", "code"},
		{ToolRunCell, `{"code":"x","timeout_seconds":0}`, "timeout_seconds", "minimum"},
		{ToolRunCell, `{"code":"x","timeout_seconds":3601}`, "timeout_seconds", "maximum"},
		{ToolRunCell, `{"code":"x","context_id":"c"}`, "context_id", "needs the sandbox_id"},
		{ToolRunCell, `{"code":"x","persistent":true}`, "", "persistent"},
		{ToolForkContext, `{"sandbox_id":"s"}`, "", "context_id"},
		{ToolForkContext, `{"sandbox_id":"","context_id":"c"}`, "sandbox_id", "minLength"},
		{ToolCloseSandbox, `{}`, "", "sandbox_id"},
	} {
		res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: c.tool, Arguments: json.RawMessage(c.args)})
		text, data := toolErr(t, res, err)
		if data.Reason != ReasonInvalidArguments || data.Field != c.field ||
			!strings.HasPrefix(text, "invalid arguments for "+c.tool+": ") || !strings.Contains(text, c.want) {
			t.Errorf("%s %s: text %q, data %+v; want invalid arguments naming %q (field %q)", c.tool, c.args, text, data, c.want, c.field)
		}
	}
}

// A Corral server that cannot be reached is a tool error that says so,
// names the endpoint and tells the model this is for its user to fix.
func TestUnreachable(t *testing.T) {
	endpoint := deadEndpoint(t)
	cs := connect(t, endpoint)
	for _, call := range []*gomcp.CallToolParams{
		{Name: ToolRunCode, Arguments: map[string]any{"language": "python", "code": "print(1)"}},
		{Name: ToolGetExecution, Arguments: map[string]any{"execution_id": "ex_1"}},
		{Name: ToolListFiles, Arguments: map[string]any{"session_id": "s"}},
		{Name: ToolReadFile, Arguments: map[string]any{"session_id": "s", "path": "a.txt"}},
		{Name: ToolWriteFile, Arguments: map[string]any{"session_id": "s", "path": "a.txt", "content": "x"}},
		{Name: ToolCreateSandbox, Arguments: map[string]any{}},
		{Name: ToolRunCell, Arguments: map[string]any{"code": "1"}},
		{Name: ToolRunCell, Arguments: map[string]any{"code": "1", "sandbox_id": "s", "context_id": "c"}},
		{Name: ToolForkContext, Arguments: map[string]any{"sandbox_id": "s", "context_id": "c"}},
		{Name: ToolCloseSandbox, Arguments: map[string]any{"sandbox_id": "s"}},
	} {
		res, err := cs.CallTool(t.Context(), call)
		text, data := toolErr(t, res, err)
		if data.Reason != ReasonCorralUnavailable || data.Endpoint != endpoint ||
			!strings.Contains(text, "The Corral server is unreachable at "+endpoint) || !strings.Contains(text, "CORRAL_ENDPOINT") {
			t.Errorf("%s: text %q, data %+v", call.Name, text, data)
		}
	}
}

func TestHTTPToken(t *testing.T) {
	srv := New(sandbox.NewClient(sandbox.Config{Endpoint: deadEndpoint(t)}), Options{})
	hs := httptest.NewServer(srv.Handler(HTTPOptions{Token: "s3cret"}))
	defer hs.Close()
	client := gomcp.NewClient(&gomcp.Implementation{Name: "test", Version: "1"}, nil)

	_, err := client.Connect(t.Context(), &gomcp.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1}, nil)
	if err == nil {
		t.Fatal("connected without the token")
	}
	resp, err := http.Post(hs.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("without token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	hc := &http.Client{Transport: bearer{"s3cret"}}
	cs, err := client.Connect(t.Context(), &gomcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	defer cs.Close()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(res.Tools) != 11 {
		t.Fatalf("list tools with the token: %v %v", res, err)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt": "a.txt", "output/x.png": "output/x.png", "/workspace/output/x.png": "output/x.png",
		"/workspace": "", "/workspace/": "", "/workspaces/x": "/workspaces/x", "workspace/x": "workspace/x",
	} {
		if got := workspacePath(in); got != want {
			t.Errorf("workspacePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAsText(t *testing.T) {
	for _, c := range []struct {
		data      string
		truncated bool
		want      string
		ok        bool
	}{
		{"hello\n", false, "hello\n", true},
		{"", false, "", true},
		{"h\xc3\xa9", false, "hé", true},
		{"h\xc3", true, "h", true},   // cut inside é
		{"h\xc3", false, "", false},  // a whole file that is not UTF-8
		{"a\x00b", false, "", false}, // NUL: binary
		{"\x89PNG\r\n\x1a\n", false, "", false},
	} {
		got, ok := asText([]byte(c.data), c.truncated)
		if got != c.want || ok != c.ok {
			t.Errorf("asText(%q, %v) = %q, %v; want %q, %v", c.data, c.truncated, got, ok, c.want, c.ok)
		}
	}
}

func TestCapWriter(t *testing.T) {
	w := &capWriter{max: 4}
	if n, err := w.Write([]byte("abc")); n != 3 || err != nil {
		t.Fatalf("first write: %d %v", n, err)
	}
	if n, err := w.Write([]byte("def")); n != 2 || !errors.Is(err, errCapped) || string(w.buf) != "abcde" {
		t.Fatalf("second write: %d %v %q", n, err, w.buf)
	}
	w = &capWriter{max: 4}
	if _, err := w.Write([]byte("abcd")); err != nil {
		t.Fatalf("exactly max bytes: %v", err)
	}
}

// A server still installing gVisor is busy, not failing: the model is told
// when to retry.
func TestTierUnavailableIsBusy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"code":"tier_unavailable","message":"this execution runs on the gvisor tier (auto: python uses subprocess (line 1)), which is still being installed on this server"}}`))
	}))
	defer srv.Close()
	cs := connect(t, srv.URL)
	res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: ToolRunCode,
		Arguments: map[string]any{"language": "python", "code": "import subprocess"}})
	text, data := toolErr(t, res, err)
	if data.Reason != ReasonBusy || data.Code != "tier_unavailable" || !strings.Contains(text, "still being installed") ||
		!strings.Contains(text, "Retry run_code in 30s") {
		t.Errorf("text %q, data %+v", text, data)
	}
}
