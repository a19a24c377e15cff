//go:build linux

package kernel_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// startLink starts a local agent (this test binary) on a new root behind
// an agent.Link, whose Attach replaces the host's stream the way a restore
// on another node process does while the agent runs on.
func startLink(t *testing.T) *agent.Link {
	t.Helper()
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts' unit tests run it)")
	root := t.TempDir()
	for _, d := range []string{"workspace", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := agent.StartLink(os.Args[0], root, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() }) // the agent kills its processes and exits
	return l
}

// TestRestoreResumedContexts: contexts saved with their sandbox (Suspend, Save,
// the description through JSON) are taken up by a new Contexts on a new
// client of the resumed agent (Restore), as a node that did not pause the
// sandbox does. The context whose process the agent runs keeps its
// variables, id, language, working directory and execution count; one
// whose process the agent does not run (lost) cannot fork, and its next
// cell restarts it and says so.
func TestRestoreResumedContexts(t *testing.T) {
	r := startLink(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	c1 := agent.NewClient(r.Attach())
	if _, err := c1.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	o := kernel.Options{Env: []string{"PATH=/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"}}
	s1 := &localBox{k: kernel.New(c1, o)}
	kept := s1.create(t, kernel.ContextOptions{Env: []string{"WHO=kept"}})
	lost := s1.create(t, kernel.ContextOptions{Cwd: "/tmp"})
	s1.run(t, kept, "x = 41")
	s1.run(t, lost, "y = 1")
	want := s1.k.List()

	if err := s1.k.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c1.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s1.k.Save())
	if err != nil {
		t.Fatal(err)
	}
	var saved kernel.Saved
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s1.k.Save(), saved); diff != "" {
		t.Fatalf("the description through JSON (-before +after):\n%s", diff)
	}
	if len(saved.Contexts) != 2 || saved.Roots["python"] == 0 {
		t.Fatalf("saved: %+v, want two contexts and the python root", saved)
	}
	// The lost context's process is one the resumed agent does not run.
	saved.Contexts[1].Process = 1 << 30

	c2 := agent.NewResumedClient(r.Attach())
	if _, err := c2.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	k2, n, err := kernel.Restore(c2, o, saved)
	if err != nil {
		t.Fatal(err)
	}
	s2 := &localBox{k: k2}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := k2.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if n != 1 {
		t.Errorf("restore kept %d contexts with their process, want 1", n)
	}
	if diff := cmp.Diff(want, k2.List()); diff != "" {
		t.Errorf("contexts after the restore (-before +after):\n%s", diff)
	}
	c := s2.run(t, kept, "x + 1")
	if got := c.main(); got != "42" {
		t.Errorf("x + 1 after the restore = %q (%+v), want 42", got, c.events)
	}
	if evs := c.of(sandbox.ContextEventNumberOfExecutions); len(evs) != 1 || evs[0].ExecutionCount != 2 {
		t.Errorf("execution count after the restore: %+v, want 2", evs)
	}
	if got := s2.run(t, kept, "import os; os.environ['WHO']").main(); got != "'kept'" {
		t.Errorf("WHO after the restore = %q", got)
	}
	if _, err := k2.Fork(ctx, lost); !errors.Is(err, kernel.ErrLost) {
		t.Errorf("fork of a lost context: %v, want ErrLost", err)
	}
	if err := k2.Interrupt(ctx, lost); err != nil {
		t.Errorf("interrupt of a lost context: %v", err)
	}
	c = s2.run(t, lost, "'y' in globals()")
	if e := c.err(); e == nil || e.Name != kernel.ErrorContextRestarted {
		t.Errorf("the first cell of a lost context: %+v, want a %s error", c.events, kernel.ErrorContextRestarted)
	}
	if got := c.main(); got != "False" {
		t.Errorf("'y' in globals() in a lost context's first cell: %q, want False (a fresh process)", got)
	}
	// A fork now copies the fresh process.
	if _, err := k2.Fork(ctx, lost); err != nil {
		t.Errorf("fork after the restart: %v", err)
	}
}
