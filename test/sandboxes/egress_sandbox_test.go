package sandboxes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// fetch prints what two requests through the sandbox's HTTP proxy gave.
const fetch = `
import os, urllib.request
def get(u):
    try:
        return 'ok ' + urllib.request.urlopen(u, timeout=5).read().decode()
    except Exception as e:
        return 'refused ' + type(e).__name__
port = os.environ['UPSTREAM_PORT']
print('allowed:', get('http://allowed.test:%s/' % port))
print('other:', get('http://other.test:%s/' % port))
`

// TestEgress: a live sandbox's processes, and the executions run in it,
// reach what its network.allow lets through (its proxy lives as long as
// it does) and nothing else; a sandbox without network reaches nothing.
func TestEgress(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") }))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	s := testserver.Start(t, testserver.Options{NoPool: true, Config: fmt.Sprintf(`
[network]
allow = ["*.test"]
ports = [%s]
[network.resolve]
"allowed.test" = "127.0.0.1"
"other.test" = "127.0.0.1"
`, port)})
	c := client(s)
	ctx := t.Context()
	env := map[string]string{"UPSTREAM_PORT": port}
	for _, tc := range []struct {
		name    string
		network *sandbox.Network
		want    string
	}{
		{"allowlist", &sandbox.Network{Allow: []string{"allowed.test"}}, "allowed: ok hi\nother: refused"},
		{"none", nil, "allowed: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: sandbox.IsolationContainer,
				Network: tc.network, Env: env})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Kill(context.Background())
			if _, err := sb.Files().Write(ctx, "fetch.py", strings.NewReader(fetch)); err != nil {
				t.Fatal(err)
			}
			out, errOut, _, err := sb.Run(ctx, sandbox.StartProcessRequest{Cmd: []string{"python3", "fetch.py"}})
			if err != nil || !strings.HasPrefix(string(out), tc.want) {
				t.Errorf("a process: %q %q %v, want %q", out, errOut, err, tc.want)
			}
			res, err := c.Execute(ctx, sandbox.ExecuteRequest{SessionID: sb.ID, Language: "python", Code: fetch})
			if err != nil || !strings.HasPrefix(res.Stdout, tc.want) {
				t.Errorf("an execution in it: %q %v, want %q", res.Stdout, err, tc.want)
			}
		})
	}
	// The sandbox's allowlist is narrowed by the server's, as an
	// execution's is.
	if _, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer,
		Network: &sandbox.Network{Allow: []string{"example.com"}}}); err == nil {
		t.Errorf("a sandbox allowed beyond the server's policy was made")
	}
}
