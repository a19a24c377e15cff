package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestSandboxAcrossNodes: a live sandbox made on node A is used through B
// and C as on A: a process started through B, its stdin written and its
// output read live through C, files written through C and read through B;
// every node lists it by its metadata; another tenant reaches it through
// none; deleted through C, it is gone everywhere.
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
