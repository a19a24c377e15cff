package live

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestSnapshotSandbox takes a snapshot of a running python sandbox on
// real runtimes and makes sandboxes from it. Both tiers keep the files as
// they were when it was taken (a file written after is not in it), and
// the source sandbox runs on, its background process too. gVisor keeps
// the memory: a sandbox made from the snapshot has the context, whose
// x = 21 gives x * 2 = 42, and the running process. A fork to 2 gives
// sandboxes that diverge. Another tenant finds none of it.
func TestSnapshotSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Snapshots = snapshots(t)
			r := newOnRuntimes(t, cfg)
			m, lm := r.m, r.lm
			defer func() {
				if t.Failed() || testing.Verbose() {
					t.Logf("log:\n%s", r.logs.String())
				}
			}()
			ctx := t.Context()
			memory := tier == runtime.TierGVisor
			if _, err := m.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: "src", Language: "python",
				Tier: sandbox.Isolation(tier), TimeoutSeconds: 600, Metadata: map[string]string{"k": "v"}}); err != nil {
				t.Fatal(err)
			}
			write := func(id, name, content string) {
				t.Helper()
				if _, err := m.WriteFile(ctx, "t", id, "/workspace/"+name, strings.NewReader(content)); err != nil {
					t.Fatal(err)
				}
			}
			read := func(id, name string) (string, error) {
				var b bytes.Buffer
				err := m.ReadFile(ctx, "t", id, "/workspace/"+name, &b)
				return b.String(), err
			}
			cell := func(id, cid, code string) string {
				t.Helper()
				var evs []sandbox.ContextEvent
				if err := m.RunContext(ctx, "t", id, cid, code, time.Minute, func(ev sandbox.ContextEvent) { evs = append(evs, ev) }); err != nil {
					t.Fatalf("%s: run %q: %v", id, code, err)
				}
				return mainText(evs)
			}
			write("src", "before.txt", "before\n")
			ticker, err := m.StartProcess(ctx, "t", "src", sandbox.StartProcessRequest{Cmd: []string{"sleep", "600"}})
			if err != nil {
				t.Fatal(err)
			}
			c, err := m.CreateContext(ctx, "t", "src", kernel.ContextOptions{Language: "python"})
			if err != nil {
				t.Fatal(err)
			}
			cell("src", c.ID, "x = 21")

			src, err := lm.Get("t", "src")
			if err != nil {
				t.Fatal(err)
			}
			snap, err := src.CreateSnapshot(ctx, "first")
			if err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			t.Logf("%s: snapshot %s: %.1f MiB, %.1f MiB stored, %d ms (stopped %d ms)", tier, snap.SnapshotID,
				float64(snap.SizeBytes)/(1<<20), float64(snap.StoredBytes)/(1<<20), snap.DurationMS, snap.PausedMS)
			if snap.Memory != memory || snap.Name != "first" || snap.SandboxID != "src" || snap.SizeBytes == 0 || snap.Tier != string(tier) {
				t.Fatalf("snapshot: %+v", snap)
			}
			// The source runs on, with its process and its context.
			if p, err := m.Process(ctx, "t", "src", ticker.PID, false); err != nil || !p.Running {
				t.Errorf("the source's process after the snapshot: %+v, %v", p, err)
			}
			if memory {
				if got := cell("src", c.ID, "x * 2"); got != "42" {
					t.Errorf("the source's x * 2 after the snapshot = %q, want 42", got)
				}
			}
			write("src", "after.txt", "after\n")

			// Made from it, by name: the files of the moment.
			_, info, err := lm.Create(ctx, "t", sandbox.CreateSandboxRequest{SnapshotID: "first", TimeoutSeconds: 600})
			if err != nil {
				t.Fatalf("create from the snapshot: %v", err)
			}
			id := info.SandboxID
			if id == "src" || info.Tier != string(tier) || info.Metadata["k"] != "v" || info.Language != "python" {
				t.Errorf("made from the snapshot: %+v", info)
			}
			if got, err := read(id, "before.txt"); err != nil || got != "before\n" {
				t.Errorf("before.txt in the new sandbox: %q, %v", got, err)
			}
			if _, err := read(id, "after.txt"); err == nil {
				t.Errorf("after.txt, written after the snapshot, is in the new sandbox")
			}
			if memory {
				if info.Resume == nil || !info.Resume.Memory || info.Resume.Contexts != 1 || info.Resume.Processes != 1 {
					t.Errorf("made from the snapshot with its memory: %+v", info.Resume)
				}
				if got := cell(id, c.ID, "x * 2"); got != "42" {
					t.Errorf("x * 2 in the new sandbox = %q, want 42", got)
				}
				if p, err := m.Process(ctx, "t", id, ticker.PID, false); err != nil || !p.Running {
					t.Errorf("the process in the new sandbox: %+v, %v", p, err)
				}
				// Each has its own: x changes in one alone.
				cell(id, c.ID, "x = 1")
				if got := cell("src", c.ID, "x"); got != "21" {
					t.Errorf("the source's x after the copy's changed = %q, want 21", got)
				}
			}

			// Listed for its tenant, not for another.
			list, err := lm.Snapshots(ctx, "t", SnapshotFilter{})
			if err != nil || len(list) != 1 || list[0].SnapshotID != snap.SnapshotID {
				t.Errorf("snapshots of t: %+v, %v", list, err)
			}
			if list, err := lm.Snapshots(ctx, "other", SnapshotFilter{}); err != nil || len(list) != 0 {
				t.Errorf("snapshots of another tenant: %+v, %v", list, err)
			}
			if _, err := lm.Snapshot(ctx, "other", snap.SnapshotID); !errors.Is(err, ErrSnapshotNotFound) {
				t.Errorf("another tenant's get: %v, want not found", err)
			}
			if _, _, err := lm.Create(ctx, "other", sandbox.CreateSandboxRequest{SnapshotID: snap.SnapshotID}); !errors.Is(err, ErrSnapshotNotFound) {
				t.Errorf("another tenant's create from it: %v, want not found", err)
			}
			if err := lm.DeleteSnapshot(ctx, "other", snap.SnapshotID); !errors.Is(err, ErrSnapshotNotFound) {
				t.Errorf("another tenant's delete: %v, want not found", err)
			}
			for _, bad := range []string{"../x", "a/b", "", strings.Repeat("a", 200), "x\x00"} {
				if _, err := lm.Snapshot(ctx, "t", bad); fault.Of(err).Kind != fault.InvalidArgument {
					t.Errorf("get %q: %v, want invalid", bad, err)
				}
			}
			if _, _, err := lm.Create(ctx, "t", sandbox.CreateSandboxRequest{SnapshotID: snap.SnapshotID, Image: "other"}); fault.Of(err).Field != "image" {
				t.Errorf("create from it with another image: %v, want refused", err)
			}
			if _, err := src.CreateSnapshot(ctx, "snap_x"); fault.Of(err).Field != "name" {
				t.Errorf("snapshot named snap_x: %v, want refused", err)
			}

			// A fork to 2: each goes its own way.
			if _, err := src.Fork(ctx, MaxForks+1, 0); fault.Of(err).Field != "count" {
				t.Errorf("fork to %d: %v, want refused", MaxForks+1, err)
			}
			forks, err := src.Fork(ctx, 2, time.Minute)
			if err != nil || len(forks) != 2 {
				t.Fatalf("fork: %+v, %v", forks, err)
			}
			for i, f := range forks {
				if f.Err != nil {
					t.Fatalf("fork %d: %v", i, f.Err)
				}
				write(f.Info.SandboxID, "mine.txt", f.Info.SandboxID)
			}
			for _, f := range forks {
				if got, err := read(f.Info.SandboxID, "mine.txt"); err != nil || got != f.Info.SandboxID {
					t.Errorf("fork %s's own file: %q, %v", f.Info.SandboxID, got, err)
				}
				if got, err := read(f.Info.SandboxID, "after.txt"); err != nil || got != "after\n" {
					t.Errorf("fork %s: after.txt: %q, %v", f.Info.SandboxID, got, err)
				}
				if memory {
					if got := cell(f.Info.SandboxID, c.ID, "x * 2"); got != "42" {
						t.Errorf("x * 2 in fork %s = %q, want 42", f.Info.SandboxID, got)
					}
				}
			}
			if got, _ := read("src", "mine.txt"); got != "" {
				t.Errorf("the source has a fork's file: %q", got)
			}
			if list, err := lm.Snapshots(ctx, "t", SnapshotFilter{}); err != nil || len(list) != 1 {
				t.Errorf("snapshots after the fork (its own is not listed, and deleted): %+v, %v", list, err)
			}

			if err := lm.DeleteSnapshot(ctx, "t", "first"); err != nil {
				t.Fatal(err)
			}
			if _, err := lm.Snapshot(ctx, "t", snap.SnapshotID); !errors.Is(err, ErrSnapshotNotFound) {
				t.Errorf("get after the delete: %v, want not found", err)
			}
			// The sandbox made from it runs on.
			if got, err := read(id, "before.txt"); err != nil || got != "before\n" {
				t.Errorf("before.txt after the snapshot's delete: %q, %v", got, err)
			}
		})
	}
}
