// Package mcp drives `corral mcp` — the binary built from this checkout, as
// a subprocess — with the go-sdk's own MCP client, over stdio and over
// streamable HTTP, against a real corral serve: the tools it lists, python
// runs that succeed and fail, session files, cells in the code contexts of
// live sandboxes (variables kept between calls, a second context apart, a
// fork, images, close), and the tool errors a model gets for bad
// arguments, a wrong API key and an unreachable server.
package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpCommand is `corral mcp args...` with endpoint and key as its only
// CORRAL_* environment.
func mcpCommand(t *testing.T, endpoint, key string, args ...string) *exec.Cmd {
	cmd := exec.Command(testenv.Corral(t), append([]string{"mcp"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CORRAL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CORRAL_ENDPOINT="+endpoint, "CORRAL_API_KEY="+key)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func newClient() *gomcp.Client {
	return gomcp.NewClient(&gomcp.Implementation{Name: "corral-test", Version: "1"}, nil)
}

// stdio starts `corral mcp` on stdio, as an MCP host would, and returns the
// client session. Closing it ends the process.
func stdio(t *testing.T, endpoint, key string) *gomcp.ClientSession {
	t.Helper()
	cmd := mcpCommand(t, endpoint, key)
	logs := &testenv.LogBuffer{}
	cmd.Stderr = logs
	cs, err := newClient().Connect(t.Context(), &gomcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect over stdio: %v\n%s", err, logs)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close the stdio session: %v", err)
		}
		if t.Failed() {
			t.Logf("corral mcp (stdio) log:\n%s", logs)
		}
	})
	return cs
}

// serveHTTP starts `corral mcp --http 127.0.0.1:0` and returns the URL it
// prints. It is stopped with SIGTERM at the end of t and must exit 0.
func serveHTTP(t *testing.T, endpoint, key string) string {
	t.Helper()
	cmd := mcpCommand(t, endpoint, key, "--http", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	logs := &testenv.LogBuffer{}
	urlc := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`serving MCP over streamable HTTP at (http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		// Wait only after stderr is drained (os/exec's rule for pipes).
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("corral mcp --http after SIGTERM: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("corral mcp --http ignored SIGTERM")
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("corral mcp (http) log:\n%s", logs)
		}
	})
	select {
	case u := <-urlc:
		return u
	case err := <-done:
		t.Fatalf("corral mcp --http exited: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("corral mcp --http printed no address:\n%s", logs)
	}
	return ""
}

func streamable(t *testing.T, url string) *gomcp.ClientSession {
	t.Helper()
	cs, err := newClient().Connect(t.Context(), &gomcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect over streamable HTTP at %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestMCP(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	for _, tr := range []struct {
		name    string
		connect func(t *testing.T, key string) *gomcp.ClientSession
	}{
		{"stdio", func(t *testing.T, key string) *gomcp.ClientSession { return stdio(t, srv.URL, key) }},
		{"http", func(t *testing.T, key string) *gomcp.ClientSession {
			return streamable(t, serveHTTP(t, srv.URL, key))
		}},
	} {
		t.Run(tr.name, func(t *testing.T) {
			cs := tr.connect(t, testserver.AlphaKey)
			t.Run("Tools", func(t *testing.T) { testTools(t, cs) })
			t.Run("RunPython", func(t *testing.T) { testRunPython(t, cs) })
			t.Run("Failures", func(t *testing.T) { testFailures(t, cs) })
			t.Run("SessionFiles", func(t *testing.T) { testSessionFiles(t, cs, "mcp-"+tr.name) })
			t.Run("CorralRefuses", func(t *testing.T) { testCorralRefuses(t, cs) })
			t.Run("CancelledCall", func(t *testing.T) { testCancelledCall(t, cs, srv) })
			t.Run("LiveContexts", func(t *testing.T) { testLiveContexts(t, cs, srv) })
			t.Run("CreateSandbox", func(t *testing.T) { testCreateSandbox(t, cs, srv) })
			t.Run("WrongKey", func(t *testing.T) {
				cs := tr.connect(t, "not-a-key")
				res := call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(1)"})
				text := wantToolError(t, res, "corral_unavailable")
				if !strings.Contains(text, "refused corral mcp's API key (401") || !strings.Contains(text, "CORRAL_API_KEY") {
					t.Errorf("wrong key: %q", text)
				}
			})
		})
	}
}

// call calls a tool and fails the test on a protocol error: every outcome
// of these tools, failures included, is a result.
func call(t *testing.T, cs *gomcp.ClientSession, tool string, args map[string]any) *gomcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", tool, args, err)
	}
	return res
}

// text is the result's one text content.
func text(t *testing.T, res *gomcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range res.Content {
		tc, ok := c.(*gomcp.TextContent)
		if !ok {
			t.Fatalf("content %T, want text", c)
		}
		parts = append(parts, tc.Text)
	}
	if len(parts) != 1 {
		t.Fatalf("want one text, got %q", parts)
	}
	return parts[0]
}

// structured decodes the result's structured content into v.
func structured(t *testing.T, res *gomcp.CallToolResult, v any) {
	t.Helper()
	if res.StructuredContent == nil {
		t.Fatal("no structured content")
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

// wantToolError checks that res is a tool error (isError, a text, no
// record) for reason and returns its text.
func wantToolError(t *testing.T, res *gomcp.CallToolResult, reason string) string {
	t.Helper()
	txt := text(t, res)
	if !res.IsError || res.StructuredContent != nil {
		t.Fatalf("want a tool error, got isError %v, structured %v: %q", res.IsError, res.StructuredContent, txt)
	}
	meta, _ := res.Meta["corral/error"].(map[string]any)
	if meta["reason"] != reason {
		t.Errorf("_meta %v, want reason %q; text %q", res.Meta, reason, txt)
	}
	return txt
}

// record checks a run_code or get_execution answer: the summary as text,
// the record as structured content, isError unless it succeeded.
func record(t *testing.T, res *gomcp.CallToolResult) sandbox.Result {
	t.Helper()
	var r sandbox.Result
	structured(t, res, &r)
	txt := text(t, res)
	if r.ExecutionID == "" || !r.Status.Final() || r.Summary == "" || txt != r.Summary {
		t.Errorf("record %s (%s): text %q, summary %q", r.ExecutionID, r.Status, txt, r.Summary)
	}
	if res.IsError != (r.Status != sandbox.StatusSuccess) {
		t.Errorf("isError %v for status %s", res.IsError, r.Status)
	}
	return r
}

func testTools(t *testing.T, cs *gomcp.ClientSession) {
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("%s: description %q, input schema %v, output schema %v", tool.Name, tool.Description, tool.InputSchema, tool.OutputSchema)
		}
	}
	slices.Sort(names)
	want := []string{"close_sandbox", "create_sandbox", "fork_context", "fork_sandbox", "get_execution", "list_files", "read_file", "run_cell", "run_code",
		"snapshot_sandbox", "write_file"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %q, want %q", names, want)
	}
	if init := cs.InitializeResult(); init.ServerInfo.Name != "corral" || init.Instructions == "" {
		t.Errorf("server info %+v, instructions %q", init.ServerInfo, init.Instructions)
	}
}

func testRunPython(t *testing.T, cs *gomcp.ClientSession) {
	res := call(t, cs, "run_code", map[string]any{
		"language": "python",
		"code":     "import sys\nprint('hello from mcp')\nfor i in range(3):\n    print(i * i)\nprint('note', file=sys.stderr)\n",
		"limits":   map[string]any{"timeout_ms": 20000, "memory_mb": 256},
	})
	r := record(t, res)
	if res.IsError || r.Status != sandbox.StatusSuccess || r.Stdout != "hello from mcp\n0\n1\n4\n" || r.Stderr != "note\n" ||
		r.ExitCode == nil || *r.ExitCode != 0 || r.Language != "python" || r.Limits.MemoryMB != 256 {
		t.Fatalf("run: isError %v, record %+v", res.IsError, r)
	}
	for _, want := range []string{"success: exit code 0", "hello from mcp\n", "\n4\n", "stderr: 1 line, 5 bytes, not shown", "artifacts: none"} {
		if !strings.Contains(r.Summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.Summary)
		}
	}

	// The same record, by id.
	got := record(t, call(t, cs, "get_execution", map[string]any{"execution_id": r.ExecutionID}))
	if got.ExecutionID != r.ExecutionID || got.Stdout != r.Stdout || got.Summary != r.Summary {
		t.Errorf("get_execution: %+v, want %+v", got, r)
	}
}

func testFailures(t *testing.T, cs *gomcp.ClientSession) {
	// A SyntaxError: the summary names compile_error and shows the line.
	res := call(t, cs, "run_code", map[string]any{"language": "python", "code": "x = 1\nprint('total', x +)\n"})
	r := record(t, res)
	if !res.IsError || r.Status != sandbox.StatusFailed || r.Error == nil || r.Error.Type != sandbox.ErrCompile {
		t.Fatalf("syntax error: isError %v, record %+v", res.IsError, r)
	}
	for _, want := range []string{"failed: compile_error", "line 2", "print('total', x +)", "SyntaxError", "next step: fix the code"} {
		if !strings.Contains(r.Summary, want) {
			t.Errorf("compile_error summary lacks %q:\n%s", want, r.Summary)
		}
	}
	// get_execution of a failed execution is a tool error with its record.
	if got := call(t, cs, "get_execution", map[string]any{"execution_id": r.ExecutionID}); !got.IsError || record(t, got).Summary != r.Summary {
		t.Errorf("get_execution of the failed run: isError %v", got.IsError)
	}

	// A runtime error: the traceback's line and the exit code.
	res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "def f(d):\n    return d['missing']\nf({})\n"})
	r = record(t, res)
	if !res.IsError || r.Error == nil || r.Error.Type != sandbox.ErrRuntime || r.ExitCode == nil || *r.ExitCode != 1 {
		t.Fatalf("runtime error: isError %v, record %+v", res.IsError, r)
	}
	for _, want := range []string{"failed: runtime_error, exit code 1", "return d['missing']", "KeyError: 'missing'"} {
		if !strings.Contains(r.Summary, want) {
			t.Errorf("runtime_error summary lacks %q:\n%s", want, r.Summary)
		}
	}

	// A timeout says which limit to raise.
	res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "while True:\n    pass\n",
		"limits": map[string]any{"timeout_ms": 500}})
	r = record(t, res)
	if !res.IsError || r.Error == nil || r.Error.Type != sandbox.ErrTimeout || !strings.Contains(r.Summary, "raise limits.timeout_ms (it was 500)") {
		t.Errorf("timeout: isError %v, summary:\n%s", res.IsError, r.Summary)
	}
}

// FileEntry and the file results are decoded as a client would, from the
// JSON, not with internal/mcp's types.
type fileList struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Entries   []struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Size int64  `json:"size"`
	} `json:"entries"`
}

type fileContent struct {
	Path      string `json:"path"`
	MIMEType  string `json:"mime_type"`
	Encoding  string `json:"encoding"`
	Content   string `json:"content"`
	Size      int    `json:"size"`
	Truncated bool   `json:"truncated"`
}

func testSessionFiles(t *testing.T, cs *gomcp.ClientSession, session string) {
	// write_file creates the session and the parent directory.
	res := call(t, cs, "write_file", map[string]any{"session_id": session, "path": "data/numbers.txt", "content": "3\n4\n5\n"})
	var written struct {
		Path string `json:"path"`
		Size int    `json:"size"`
	}
	structured(t, res, &written)
	if res.IsError || written.Path != "data/numbers.txt" || written.Size != 6 {
		t.Fatalf("write_file: isError %v, %+v, %q", res.IsError, written, text(t, res))
	}
	blob := []byte{0x00, 0x01, 0xfe, 0xff, 'x'}
	res = call(t, cs, "write_file", map[string]any{"session_id": session, "path": "/workspace/data/blob.bin",
		"content_base64": base64.StdEncoding.EncodeToString(blob)})
	if res.IsError {
		t.Fatalf("write_file base64: %q", text(t, res))
	}

	// A run of the session reads them and writes a file back.
	res = call(t, cs, "run_code", map[string]any{"session_id": session, "language": "python", "code": `
import os
nums = [int(l) for l in open("data/numbers.txt")]
print(sum(n * n for n in nums), len(open("data/blob.bin", "rb").read()))
os.makedirs("output", exist_ok=True)
with open("output/result.txt", "w") as f:
    f.write("sum of squares: %d\n" % sum(n * n for n in nums))
`})
	r := record(t, res)
	if res.IsError || r.Stdout != "50 5\n" || r.SessionID != session {
		t.Fatalf("run in session: isError %v, %s", res.IsError, r.Summary)
	}
	if !strings.Contains(r.Summary, "artifacts (1): result.txt") {
		t.Errorf("summary does not name the artifact:\n%s", r.Summary)
	}

	// list_files sees the directory and the files, with sizes.
	var root, data fileList
	res = call(t, cs, "list_files", map[string]any{"session_id": session})
	structured(t, res, &root)
	if res.IsError || !slices.ContainsFunc(root.Entries, func(e struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Size int64  `json:"size"`
	}) bool {
		return e.Name == "data" && e.Type == "dir"
	}) || !strings.Contains(text(t, res), "data/\n") {
		t.Errorf("list_files /workspace: %+v\n%s", root, text(t, res))
	}
	res = call(t, cs, "list_files", map[string]any{"session_id": session, "path": "data"})
	structured(t, res, &data)
	sizes := map[string]int64{}
	for _, e := range data.Entries {
		sizes[e.Name] = e.Size
	}
	if res.IsError || data.Path != "data" || len(sizes) != 2 || sizes["numbers.txt"] != 6 || sizes["blob.bin"] != 5 ||
		!strings.Contains(text(t, res), "numbers.txt (6 bytes)") {
		t.Errorf("list_files data: %+v\n%s", data, text(t, res))
	}

	// read_file returns text as text, bytes as base64, and cuts at max_bytes.
	for _, c := range []struct {
		args      map[string]any
		encoding  string
		content   string
		truncated bool
	}{
		{map[string]any{"path": "output/result.txt"}, "utf-8", "sum of squares: 50\n", false},
		{map[string]any{"path": "/workspace/data/numbers.txt"}, "utf-8", "3\n4\n5\n", false},
		{map[string]any{"path": "data/blob.bin"}, "base64", base64.StdEncoding.EncodeToString(blob), false},
		{map[string]any{"path": "output/result.txt", "max_bytes": 3}, "utf-8", "sum", true},
	} {
		c.args["session_id"] = session
		res := call(t, cs, "read_file", c.args)
		var fc fileContent
		structured(t, res, &fc)
		if res.IsError || fc.Encoding != c.encoding || fc.Content != c.content || fc.Truncated != c.truncated {
			t.Errorf("read_file %v: isError %v, %+v", c.args, res.IsError, fc)
		}
		if c.encoding == "utf-8" && (len(res.Content) == 0 || res.Content[0].(*gomcp.TextContent).Text != c.content) {
			t.Errorf("read_file %v: text content %v", c.args, res.Content)
		}
	}
}

// What Corral itself refuses comes back as a tool error naming the reason.
func testCorralRefuses(t *testing.T, cs *gomcp.ClientSession) {
	res := call(t, cs, "run_code", map[string]any{"language": "cobol", "code": "DISPLAY 'HI'."})
	if txt := text(t, res); !res.IsError || !strings.Contains(txt, "language") || !strings.Contains(txt, "cobol") || !strings.Contains(txt, "python") {
		t.Errorf("unknown language: isError %v, %q", res.IsError, txt)
	}
	res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(1)", "limits": map[string]any{"memory_mb": 1 << 30}})
	if txt := wantToolError(t, res, "invalid_arguments"); !strings.Contains(txt, "limits.memory_mb") || !strings.Contains(txt, "maximum") {
		t.Errorf("memory above the maximum: %q", txt)
	}
	res = call(t, cs, "get_execution", map[string]any{"execution_id": "ex_never_submitted"})
	if txt := wantToolError(t, res, "invalid_arguments"); !strings.Contains(txt, "404") {
		t.Errorf("unknown execution: %q", txt)
	}
	res = call(t, cs, "read_file", map[string]any{"session_id": "mcp-no-such-session", "path": "nothing.txt"})
	if txt := wantToolError(t, res, "invalid_arguments"); !strings.Contains(txt, "404") {
		t.Errorf("missing file: %q", txt)
	}
	// Arguments the schema refuses never reach Corral.
	res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(1)", "limits": map[string]any{"timeout_ms": -5}})
	if txt := wantToolError(t, res, "invalid_arguments"); !strings.Contains(txt, "limits.timeout_ms") {
		t.Errorf("negative timeout: %q", txt)
	}
}

// A client that cancels a run_code call while it waits (the go-sdk sends
// notifications/cancelled) cancels the execution on the server, so it does
// not run on for nobody. Were the cancel lost, the program would sleep to
// its end and succeed.
func testCancelledCall(t *testing.T, cs *gomcp.ClientSession, srv *testserver.Server) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &gomcp.CallToolParams{Name: "run_code", Arguments: map[string]any{
			"language": "python", "code": "import time\nprint('mcp-cancel-me', flush=True)\ntime.sleep(20)\n",
			"limits": map[string]any{"timeout_ms": 25000}}})
		errc <- err
	}()
	list := func(status string) []sandbox.Result {
		var page struct {
			Executions []sandbox.Result `json:"executions"`
		}
		if code, body := srv.Call(testserver.AlphaKey, http.MethodGet, "/v1/executions?language=python&status="+status, nil, &page); code != http.StatusOK {
			t.Fatalf("list %s executions: %d %s", status, code, body)
		}
		return page.Executions
	}
	var id string
	for id == "" {
		for _, r := range list("running") {
			id = r.ExecutionID
		}
		select {
		case err := <-errc:
			t.Fatalf("run_code returned before it was cancelled: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-errc; err == nil {
		t.Errorf("a cancelled call returned a result")
	}
	for {
		var r sandbox.Result
		if code, body := srv.Call(testserver.AlphaKey, http.MethodGet, "/v1/executions/"+id, nil, &r); code != http.StatusOK {
			t.Fatalf("get %s: %d %s", id, code, body)
		}
		if r.Status.Final() {
			if r.Status != sandbox.StatusCancelled {
				t.Errorf("execution %s of the cancelled call: %s (%s), want cancelled", id, r.Status, r.Summary)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cellOutput is run_cell's structured result, decoded as a client would.
type cellOutput struct {
	SandboxID      string   `json:"sandbox_id"`
	ContextID      string   `json:"context_id"`
	Created        []string `json:"created"`
	ExecutionCount int      `json:"execution_count"`
	Stdout         string   `json:"stdout"`
	Stderr         string   `json:"stderr"`
	Results        []struct {
		MIMETypes []string          `json:"mime_types"`
		Data      map[string]string `json:"data"`
		IsMain    bool              `json:"is_main_result"`
	} `json:"results"`
	Error *struct {
		Name      string   `json:"name"`
		Value     string   `json:"value"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// main is the text/plain of the cell's main result ("" if none).
func (o cellOutput) main() string {
	for _, r := range o.Results {
		if r.IsMain {
			return r.Data["text/plain"]
		}
	}
	return ""
}

// cell calls run_cell and returns its text, its images and its structured
// result.
func cell(t *testing.T, cs *gomcp.ClientSession, args map[string]any) (string, []*gomcp.ImageContent, cellOutput, bool) {
	t.Helper()
	res := call(t, cs, "run_cell", args)
	var out cellOutput
	structured(t, res, &out)
	if len(res.Content) == 0 {
		t.Fatalf("run_cell %v: no content", args)
	}
	txt, ok := res.Content[0].(*gomcp.TextContent)
	if !ok {
		t.Fatalf("run_cell %v: first content %T, want text", args, res.Content[0])
	}
	var imgs []*gomcp.ImageContent
	for _, c := range res.Content[1:] {
		img, ok := c.(*gomcp.ImageContent)
		if !ok {
			t.Fatalf("run_cell %v: content %T after the text, want images", args, c)
		}
		imgs = append(imgs, img)
	}
	if res.IsError != (out.Error != nil) {
		t.Errorf("run_cell %v: isError %v with error %+v", args, res.IsError, out.Error)
	}
	return txt.Text, imgs, out, res.IsError
}

// sandboxGone checks through the SDK, not through corral mcp, that live
// sandbox id no longer exists.
func sandboxGone(t *testing.T, srv *testserver.Server, id string) {
	t.Helper()
	c := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey})
	if info, err := c.Sandbox(id).Info(t.Context()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("sandbox %s after close_sandbox: %+v, %v; want not found", id, info, err)
	}
}

// A model's variables persist between run_cell calls in one context: the
// first call makes the sandbox and the context, the next ones name them; a
// second context does not see the first's variables; a fork does, and the
// two then diverge; images come as image content; closing a context, then
// the sandbox, ends them.
func testLiveContexts(t *testing.T, cs *gomcp.ClientSession, srv *testserver.Server) {
	txt, _, first, isErr := cell(t, cs, map[string]any{"code": "x = 21"})
	if isErr || first.SandboxID == "" || first.ContextID == "" || !slices.Equal(first.Created, []string{"sandbox", "context"}) ||
		first.ExecutionCount != 1 || len(first.Results) != 0 {
		t.Fatalf("x = 21: %+v\n%s", first, txt)
	}
	sb, cid := first.SandboxID, first.ContextID
	defer func() {
		// A failed test must not leave the sandbox to its timeout.
		if t.Failed() {
			c := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey})
			c.Sandbox(sb).Kill(context.Background())
		}
	}()
	if !strings.Contains(txt, "sandbox "+sb+", context "+cid+", cell 1 (sandbox and context made by this call") {
		t.Errorf("x = 21: text %q", txt)
	}
	in := func(ctx, code string) map[string]any {
		return map[string]any{"sandbox_id": sb, "context_id": ctx, "code": code}
	}

	txt, _, out, isErr := cell(t, cs, in(cid, "x * 2"))
	if isErr || out.main() != "42" || out.SandboxID != sb || out.ContextID != cid || out.Created != nil || out.ExecutionCount != 2 {
		t.Errorf("x * 2: %+v\n%s", out, txt)
	}
	if !strings.Contains(txt, "result: 42\n") {
		t.Errorf("x * 2: text %q lacks the result", txt)
	}

	// stdout, stderr and the result, in text and structured.
	txt, _, out, _ = cell(t, cs, in(cid, "import sys\nprint('hello', x)\nprint('careful', file=sys.stderr)\nx + 1"))
	if out.Stdout != "hello 21\n" || out.Stderr != "careful\n" || out.main() != "22" ||
		!strings.Contains(txt, "stdout:\nhello 21\n") || !strings.Contains(txt, "stderr:\ncareful\n") || !strings.Contains(txt, "result: 22\n") {
		t.Errorf("print and value: %+v\n%s", out, txt)
	}

	// A second context, made by leaving out context_id, does not see x.
	txt, _, other, isErr := cell(t, cs, map[string]any{"sandbox_id": sb, "code": "x"})
	if !isErr || other.ContextID == "" || other.ContextID == cid || !slices.Equal(other.Created, []string{"context"}) ||
		other.Error == nil || other.Error.Name != "NameError" || !strings.Contains(other.Error.Value, "'x'") || len(other.Error.Traceback) == 0 {
		t.Errorf("x in a second context: %+v\n%s", other, txt)
	}
	if !strings.Contains(txt, "error: NameError: name 'x' is not defined\ntraceback:\n") {
		t.Errorf("x in a second context: text %q", txt)
	}

	// A fork sees x; then the two diverge.
	res := call(t, cs, "fork_context", map[string]any{"sandbox_id": sb, "context_id": cid})
	var fork struct {
		SandboxID  string `json:"sandbox_id"`
		ContextID  string `json:"context_id"`
		ForkedFrom string `json:"forked_from"`
	}
	structured(t, res, &fork)
	if res.IsError || fork.SandboxID != sb || fork.ForkedFrom != cid || fork.ContextID == "" || fork.ContextID == cid || fork.ContextID == other.ContextID {
		t.Fatalf("fork_context: %+v, %q", fork, text(t, res))
	}
	if _, _, out, _ := cell(t, cs, in(fork.ContextID, "x")); out.main() != "21" {
		t.Errorf("x in the fork: %+v", out)
	}
	cell(t, cs, in(fork.ContextID, "x = -1"))
	cell(t, cs, in(cid, "x += 1"))
	_, _, a, _ := cell(t, cs, in(cid, "x"))
	_, _, f, _ := cell(t, cs, in(fork.ContextID, "x"))
	if a.main() != "22" || f.main() != "-1" {
		t.Errorf("after diverging: original %q, fork %q; want 22, -1", a.main(), f.main())
	}

	// An image/png result is image content that decodes as PNG. The PNG is
	// made by hand (the default image has no matplotlib): 3x2, grey.
	txt, imgs, out, _ := cell(t, cs, in(cid, `import struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 3, 2, 8, 0, 0, 0, 0)) + \
    chunk(b'IDAT', zlib.compress(b'\x00\x80\x80\x80' * 2)) + chunk(b'IEND', b'')
class Picture:
    def _repr_png_(self):
        return png
display(Picture())
print('shown')`))
	if len(imgs) != 1 || imgs[0].MIMEType != "image/png" || len(out.Results) != 1 || !slices.Contains(out.Results[0].MIMETypes, "image/png") ||
		out.Stdout != "shown\n" || !strings.Contains(txt, "display [image/png attached as an image]") {
		t.Fatalf("display of a PNG: %d images, %+v\n%s", len(imgs), out, txt)
	}
	img, err := png.Decode(bytes.NewReader(imgs[0].Data))
	if err != nil || img.Bounds().Dx() != 3 || img.Bounds().Dy() != 2 {
		t.Errorf("the image content: %v, %v", err, img)
	}

	// Closing a context ends it alone.
	res = call(t, cs, "close_sandbox", map[string]any{"sandbox_id": sb, "context_id": fork.ContextID})
	if res.IsError || !strings.Contains(text(t, res), "Closed context "+fork.ContextID) {
		t.Errorf("close the fork: %q", text(t, res))
	}
	txt = wantToolError(t, call(t, cs, "run_cell", in(fork.ContextID, "x")), "invalid_arguments")
	if !strings.Contains(txt, "404") || !strings.Contains(txt, "Omit context_id") {
		t.Errorf("run in a closed context: %q", txt)
	}
	if _, _, out, _ := cell(t, cs, in(cid, "x")); out.main() != "22" {
		t.Errorf("x after the fork was closed: %+v", out)
	}

	// Closing the sandbox ends it: the server no longer knows it.
	res = call(t, cs, "close_sandbox", map[string]any{"sandbox_id": sb})
	if res.IsError || !strings.Contains(text(t, res), "Closed sandbox "+sb) {
		t.Errorf("close the sandbox: %q", text(t, res))
	}
	sandboxGone(t, srv, sb)
	wantToolError(t, call(t, cs, "run_cell", in(cid, "x")), "invalid_arguments")
}

// create_sandbox makes a sandbox with the settings asked for and one
// context that run_cell uses.
func testCreateSandbox(t *testing.T, cs *gomcp.ClientSession, srv *testserver.Server) {
	res := call(t, cs, "create_sandbox", map[string]any{"tier": "container", "timeout_seconds": 120, "env": map[string]any{"GREETING": "hi"}})
	var live struct {
		SandboxID string    `json:"sandbox_id"`
		ContextID string    `json:"context_id"`
		Language  string    `json:"language"`
		Tier      string    `json:"tier"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	structured(t, res, &live)
	if res.IsError || live.SandboxID == "" || live.ContextID == "" || live.Language != "python" || live.Tier != "container" ||
		time.Until(live.ExpiresAt) > 120*time.Second || time.Until(live.ExpiresAt) < 60*time.Second {
		t.Fatalf("create_sandbox: %+v\n%s", live, text(t, res))
	}
	defer call(t, cs, "close_sandbox", map[string]any{"sandbox_id": live.SandboxID})
	if !strings.Contains(text(t, res), "run_cell") {
		t.Errorf("create_sandbox text: %q", text(t, res))
	}
	_, _, out, _ := cell(t, cs, map[string]any{"sandbox_id": live.SandboxID, "context_id": live.ContextID,
		"code": "import os\nos.environ['GREETING'] + ' from ' + os.getcwd()"})
	if out.main() != "'hi from /workspace'" || out.ExecutionCount != 1 {
		t.Errorf("a cell in the created context: %+v", out)
	}
}
