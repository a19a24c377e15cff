package cluster

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/tlscert/certtest"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestSandboxAcrossNodesTLS: nodes that serve https forward to each other
// over https, verified with [tls] peer_ca: a live sandbox made on A is
// used through B (a process started and waited for, a file written and
// read back through A). A node whose peer_ca is another CA does not reach
// A: its calls for the sandbox answer 503 sandbox_unavailable, naming it.
func TestSandboxAcrossNodesTLS(t *testing.T) {
	storeURL, stateURL := testenv.Postgres(t), testenv.Redis(t)
	files := testserver.LocalTLS(t, certtest.NewCA(t), "")
	otherCA := filepath.Join(t.TempDir(), "other-ca.pem")
	certtest.WriteFile(t, otherCA, certtest.NewCA(t).PEM)
	start := func(name string, extra ...string) *testserver.Server {
		return testserver.Start(t, testserver.Options{Store: storeURL, State: stateURL, NoPool: true, TLS: files,
			Config: clusterConfig, Extra: append([]string{"--node-id", name}, extra...)})
	}
	a, b, c := start("node-a"), start("node-b"), start("node-c", "--tls-peer-ca", otherCA)
	tlsClient := func(s *testserver.Server) *sandbox.Client {
		return sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute, HTTPClient: s.HTTP})
	}
	ctx := t.Context()
	ca1, cb := tlsClient(a), tlsClient(b)
	sb, _, err := ca1.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer, TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	p, err := cb.Sandbox(sb.ID).Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"sh", "-c", "echo over https"}})
	if err != nil {
		t.Fatalf("start through B: %v", err)
	}
	if exit, err := cb.Sandbox(sb.ID).Process(p.PID).Wait(ctx); err != nil || exit.ExitCode != 0 {
		t.Errorf("wait through B: %+v, %v", exit, err)
	}
	if _, err := cb.Sandbox(sb.ID).Files().Write(ctx, "note.txt", strings.NewReader("from B")); err != nil {
		t.Fatalf("write through B: %v", err)
	}
	var buf bytes.Buffer
	if err := ca1.Sandbox(sb.ID).Files().Read(ctx, "/workspace/note.txt", &buf); err != nil || buf.String() != "from B" {
		t.Errorf("read through A: %q, %v", buf.String(), err)
	}
	status, e := rawCall(t, c, http.MethodGet, "/v1/sandboxes/"+sb.ID)
	if status != http.StatusServiceUnavailable || e.Code != "sandbox_unavailable" || !strings.Contains(e.Message, sb.ID) {
		t.Errorf("through a node that does not trust A's CA: %d %+v, want 503 sandbox_unavailable", status, e)
	}
}
