package mcp

import (
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// With no Corral server at the endpoint, every tool answers a tool error
// that names the endpoint; nothing needs root or a sandbox.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()
	for _, tr := range []struct {
		name    string
		connect func(t *testing.T) *gomcp.ClientSession
	}{
		{"stdio", func(t *testing.T) *gomcp.ClientSession { return stdio(t, endpoint, "k") }},
		{"http", func(t *testing.T) *gomcp.ClientSession { return streamable(t, serveHTTP(t, endpoint, "k")) }},
	} {
		t.Run(tr.name, func(t *testing.T) {
			cs := tr.connect(t)
			for tool, args := range map[string]map[string]any{
				"run_code":       {"language": "python", "code": "print(1)"},
				"get_execution":  {"execution_id": "ex_1"},
				"list_files":     {"session_id": "s"},
				"read_file":      {"session_id": "s", "path": "a.txt"},
				"write_file":     {"session_id": "s", "path": "a.txt", "content": "x"},
				"create_sandbox": {},
				"run_cell":       {"code": "1"},
				"fork_context":   {"sandbox_id": "s", "context_id": "c"},
				"close_sandbox":  {"sandbox_id": "s"},
			} {
				txt := wantToolError(t, call(t, cs, tool, args), "corral_unavailable")
				if !strings.Contains(txt, "unreachable at "+endpoint) {
					t.Errorf("%s: %q", tool, txt)
				}
			}
		})
	}
}

// The HTTP server guards the API key it holds: it refuses to listen beyond
// loopback without a token, and on loopback it refuses requests whose Host
// is not loopback (a web page's DNS rebinding) or that a browser sent
// cross-origin.
func TestHTTPGuards(t *testing.T) {
	cmd := mcpCommand(t, "http://127.0.0.1:1", "k", "--http", "0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 4 || !strings.Contains(string(out), "--http-token") {
		t.Errorf("corral mcp --http 0.0.0.0:0 without a token: %v\n%s", err, out)
	}

	url := serveHTTP(t, "http://127.0.0.1:1", "k")
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, c := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"rebound host", map[string]string{"Host": "attacker.example"}, http.StatusForbidden},
		{"cross-origin browser", map[string]string{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"plain client", nil, http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(initialize))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		if h := c.header["Host"]; h != "" {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
}
