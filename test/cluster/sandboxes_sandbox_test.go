package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestSandboxAcrossNodes: a live sandbox made on node A is used through B
// and C as on A: a process started through B, its stdin written and its
// output read live through C, files written through C and read through B,
// its metrics read through B; every node lists it by its metadata; another
// tenant reaches it through none; deleted through C, it is gone everywhere.
func TestSandboxAcrossNodes(t *testing.T) {
	nodes := startNodes(t, nil, nil, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx := t.Context()
	ca, cb, cc := client(a, testserver.AlphaKey), client(b, testserver.AlphaKey), client(c, testserver.AlphaKey)
	sbA, _, err := ca.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer, TimeoutSeconds: 600,
		Metadata: map[string]string{"run": "across"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbA.Kill(context.Background())
	p, err := cb.Sandbox(sbA.ID).Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatalf("start through B: %v", err)
	}
	onC := cc.Sandbox(sbA.ID).Process(p.PID)
	if err := onC.WriteStdin(ctx, strings.NewReader("via C\n")); err != nil {
		t.Fatalf("stdin through C: %v", err)
	}
	var got []byte
	for ev, err := range onC.Events(ctx, 0) {
		if err != nil {
			t.Fatalf("events through C: %v", err)
		}
		if ev.Type == sandbox.ProcessEventStdout {
			got = append(got, ev.Data...)
			if string(got) == "via C\n" {
				break // live: before the process ends
			}
		}
	}
	if string(got) != "via C\n" {
		t.Errorf("output through C: %q", got)
	}
	if err := cb.Sandbox(sbA.ID).Process(p.PID).CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if exit, err := ca.Sandbox(sbA.ID).Process(p.PID).Wait(ctx); err != nil || exit.ExitCode != 0 {
		t.Errorf("wait through A: %+v, %v", exit, err)
	}
	if _, err := cc.Sandbox(sbA.ID).Files().Write(ctx, "note.txt", strings.NewReader("from C")); err != nil {
		t.Fatalf("write through C: %v", err)
	}
	var buf bytes.Buffer
	if err := cb.Sandbox(sbA.ID).Files().Read(ctx, "/workspace/note.txt", &buf); err != nil || buf.String() != "from C" {
		t.Errorf("read through B: %q, %v", buf.String(), err)
	}
	// Its readings, kept on A, through B.
	if ms, err := cb.Sandbox(sbA.ID).Metrics(ctx, time.Time{}, time.Time{}); err != nil || len(ms) == 0 ||
		ms[0].MemoryLimitBytes <= 0 || ms[0].DiskUsedBytes <= 0 {
		t.Errorf("metrics through B: %+v, %v", ms, err)
	}
	if _, err := client(c, testserver.BetaKey).Sandbox(sbA.ID).Metrics(ctx, time.Time{}, time.Time{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("beta's metrics through C: %v, want not found", err)
	}
	for _, cl := range []*sandbox.Client{ca, cb, cc} {
		l, err := cl.ListSandboxes(ctx, map[string]string{"run": "across"})
		if err != nil || len(l) != 1 || l[0].SandboxID != sbA.ID {
			t.Errorf("list by metadata: %+v, %v", l, err)
		}
		if _, err := client(b, testserver.BetaKey).Sandbox(sbA.ID).Info(ctx); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("beta's Info: %v, want not found", err)
		}
	}
	if l, err := client(c, testserver.BetaKey).ListSandboxes(ctx, nil); err != nil || len(l) != 0 {
		t.Errorf("beta's list: %+v, %v", l, err)
	}
	if err := cc.Sandbox(sbA.ID).Kill(ctx); err != nil {
		t.Fatalf("kill through C: %v", err)
	}
	for _, cl := range []*sandbox.Client{ca, cb, cc} {
		if _, err := cl.Sandbox(sbA.ID).Info(ctx); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("after the kill: %v, want not found", err)
		}
		if l, err := cl.ListSandboxes(ctx, nil); err != nil || len(l) != 0 {
			t.Errorf("after the kill, listed: %+v, %v", l, err)
		}
	}
}

// TestSandboxOwnerLost: once the node that owns a live sandbox is killed,
// its /v1/sandboxes calls through another node answer at once with the
// sandbox's error, field sandbox_id, naming it: 503 sandbox_unavailable
// while the node may come back, 410 sandbox_lost once it is lost; the same
// id through /v1/sessions answers as a session's. Deleting it frees the
// id, for another sandbox on another node; the node that lost it drops
// its copy when it comes back.
func TestSandboxOwnerLost(t *testing.T) {
	nodes := startNodes(t, nil, nil)
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	sb, _, err := client(a, testserver.AlphaKey).CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer,
		TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	a.Kill()
	killed := time.Now()
	check := func(path string, status int, code, field string) {
		t.Helper()
		got, body := rawCall(t, b, "GET", path)
		if got != status || body.Code != code || body.Field != field || !strings.Contains(body.Message, sb.ID) {
			t.Errorf("GET %s: %d %+v; want %d %s (field %s) naming %s", path, got, body, status, code, field, sb.ID)
		}
	}
	check("/v1/sandboxes/"+sb.ID, http.StatusServiceUnavailable, "sandbox_unavailable", "sandbox_id")
	check("/v1/sandboxes/"+sb.ID+"/processes", http.StatusServiceUnavailable, "sandbox_unavailable", "sandbox_id")
	check("/v1/sessions/"+sb.ID, http.StatusServiceUnavailable, "session_unavailable", "session_id")
	for {
		got, _ := rawCall(t, b, "GET", "/v1/sandboxes/"+sb.ID)
		if got == http.StatusGone {
			break
		}
		if got != http.StatusServiceUnavailable || time.Since(killed) > 20*time.Second {
			t.Fatalf("%v after the kill: %d", time.Since(killed), got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	check("/v1/sandboxes/"+sb.ID, http.StatusGone, "sandbox_lost", "sandbox_id")
	check("/v1/sessions/"+sb.ID, http.StatusGone, "session_lost", "session_id")
	if _, err := client(b, testserver.AlphaKey).Sandbox(sb.ID).Info(ctx); !errors.Is(err, sandbox.ErrSandboxLost) {
		t.Errorf("the SDK's Info of a lost sandbox: %v, want ErrSandboxLost", err)
	}
	if got, body := rawCall(t, b, "DELETE", "/v1/sandboxes/"+sb.ID); got != http.StatusNoContent {
		t.Errorf("delete a lost sandbox: %d %+v", got, body)
	}
	if got, body := rawCall(t, b, "GET", "/v1/sandboxes/"+sb.ID); got != http.StatusNotFound {
		t.Errorf("after the delete: %d %+v, want 404", got, body)
	}
	// The id is free: made again on B.
	if _, _, err := client(b, testserver.AlphaKey).CreateSandbox(ctx, sandbox.CreateSandboxRequest{SandboxID: sb.ID,
		Tier: sandbox.IsolationContainer}); err != nil {
		t.Fatalf("make the freed id again: %v", err)
	}
	// A comes back: it reaps the sandbox its killed process left and drops
	// its copy of the id, now B's.
	a.Launch()
	if _, err := os.Stat(filepath.Join(a.Data, "sessions", "alpha", sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("node A kept its stale copy of the sandbox: %v", err)
	}
}

// apiError is an error answer's body.
type apiError struct{ Code, Message, Field string }

// rawCall sends a request as tenant alpha and returns the status and the
// error body.
func rawCall(t *testing.T, s *testserver.Server, method, path string) (int, apiError) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testserver.AlphaKey)
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var body struct{ Error apiError }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error
}
