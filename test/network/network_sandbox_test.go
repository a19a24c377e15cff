// Package network tests egress through a real corral serve: no network by
// default; with network.allow, only the allowed domains through the
// server's proxy, secrets injected by the proxy and never seen by the
// program, private addresses and direct connections refused, and every
// attempt in the audit log — on both tiers.
package network

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const secret = "secret-token-5c1e"

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// probe reports, one line each: the allowed request's answer, what the
// other attempts gave, and whether the secret is anywhere the program can
// look.
var probe = `
import os, socket, subprocess, urllib.request
def get(u):
    try:
        return 'ok ' + urllib.request.urlopen(u, timeout=5).read().decode()
    except Exception as e:
        return 'refused ' + type(e).__name__
port = int(os.environ['UPSTREAM_PORT'])
print('allowed:', get('http://allowed.test:%d/hello' % port))
print('other:', get('http://other.test:%d/' % port))
print('private:', get('http://private.test:%d/' % port))
print('address:', get('http://10.0.0.1:%d/' % port))
print('metadata:', get('http://169.254.169.254/latest/meta-data/'))
for target in [('127.0.0.1', port), ('10.0.0.1', 80), ('1.1.1.1', 443)]:
    try:
        socket.create_connection(target, timeout=2)
        print('direct:', target, 'connected')
    except OSError as e:
        print('direct:', target, 'refused')
try:
    socket.getaddrinfo('example.com', 80)
    print('dns: resolved')
except OSError:
    print('dns: refused')
# The secret, spelled backwards so that this code does not hold it.
needle = '` + reverse(secret) + `'[::-1]
env = '\n'.join('%s=%s' % kv for kv in os.environ.items())
files = subprocess.run(['grep', '-rls', needle, '/workspace', '/tmp', '/etc', '/proc/self/environ'], capture_output=True, text=True).stdout
print('secret in env:', needle in env, 'in files:', bool(files.strip()))
`

func TestEgress(t *testing.T) {
	var hits, secretHits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("X-Api-Key") == secret {
			secretHits.Add(1)
		}
		fmt.Fprintf(w, "hi key=%v", r.Header.Get("X-Api-Key") == secret)
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	s := testserver.Start(t, testserver.Options{Config: fmt.Sprintf(`
[network]
allow = ["*.test"]
ports = [%s, 80, 443]
[network.resolve]
"allowed.test" = "127.0.0.1"
"other.test" = "127.0.0.1"
[[network.secrets]]
domain = "allowed.test"
header = "X-Api-Key"
value = %q
`, port, secret)})

	// Without network: nothing gets out, and the upstream sees nothing.
	var res sandbox.Result
	code, raw := s.Call(testserver.AlphaKey, "POST", "/v1/executions?wait=true", sandbox.ExecuteRequest{Language: "python",
		Env: map[string]string{"UPSTREAM_PORT": port}, Code: probe}, &res)
	if code != 200 || !strings.Contains(res.Stdout, "allowed: refused") {
		t.Fatalf("no network: %d %s %q", code, raw, res.Stdout)
	}

	// A request cannot widen the server's policy.
	for i, allow := range [][]string{{"example.com"}, {"*"}, {"*.test", "evil.com"}} {
		code, raw := s.Call(testserver.AlphaKey, "POST", "/v1/executions", sandbox.ExecuteRequest{Language: "python", Code: "1",
			Network: &sandbox.Network{Allow: allow}}, nil)
		if code != 400 || !strings.Contains(string(raw), "network.allow") {
			t.Errorf("widening %d: %d %s", i, code, raw)
		}
	}

	for _, tier := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			before := secretHits.Load()
			var res sandbox.Result
			code, raw := s.Call(testserver.AlphaKey, "POST", "/v1/executions?wait=true", sandbox.ExecuteRequest{Language: "python",
				Isolation: tier, Env: map[string]string{"UPSTREAM_PORT": port}, Code: probe,
				Network: &sandbox.Network{Allow: []string{"allowed.test"}}}, &res)
			if code != 200 || res.Status != sandbox.StatusSuccess {
				t.Fatalf("%d %s", code, raw)
			}
			out := res.Stdout
			for _, want := range []string{
				"allowed: ok hi key=true",
				"other: refused", "private: refused", "address: refused", "metadata: refused",
				"direct: ('127.0.0.1', " + port + ") refused", "direct: ('10.0.0.1', 80) refused", "direct: ('1.1.1.1', 443) refused",
				"dns: refused",
				"secret in env: False in files: False",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in:\n%s\n%s", want, out, res.Stderr)
				}
			}
			if secretHits.Load() != before+1 {
				t.Errorf("the secret reached the upstream %d times", secretHits.Load()-before)
			}
			var audit struct{ Attempts []sandbox.EgressAttempt }
			if code, raw := s.Call(testserver.AlphaKey, "GET", "/v1/executions/"+res.ExecutionID+"/egress", nil, &audit); code != 200 {
				t.Fatalf("egress log: %d %s", code, raw)
			}
			seen := map[string]bool{}
			for _, a := range audit.Attempts {
				seen[fmt.Sprintf("%s %v", a.Host, a.Allowed)] = true
				if !a.Allowed && a.Reason == "" {
					t.Errorf("refused attempt without a reason: %+v", a)
				}
				if a.Allowed && a.BytesDown == 0 {
					t.Errorf("allowed attempt without bytes: %+v", a)
				}
			}
			for _, want := range []string{"allowed.test true", "other.test false", "private.test false", "10.0.0.1 false", "169.254.169.254 false"} {
				if !seen[want] {
					t.Errorf("audit log lacks %q: %+v", want, audit.Attempts)
				}
			}
			// Another tenant cannot read it.
			if code, _ := s.Call(testserver.BetaKey, "GET", "/v1/executions/"+res.ExecutionID+"/egress", nil, nil); code != 404 {
				t.Errorf("beta reads alpha's egress log: %d", code)
			}
		})
	}
	if hits.Load() < 2 {
		t.Errorf("upstream hits %d", hits.Load())
	}
}
