package live

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// snapshots is a snapshot store in a directory of t's own.
func snapshots(t *testing.T) *snapshot.Store {
	t.Helper()
	b, err := local.New(t.TempDir(), "http://127.0.0.1:1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.New(b, snapshot.Options{Lease: snapshot.MinLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })
	return s
}

// TestSnapshotMaterialize: a paused sandbox written to the snapshot store
// (Sandbox.Snapshot) and removed from its node is made again by another
// node's Manager on a directory of its own (Materialize, same id: a move)
// and resumed there with its file; on gVisor with a context's variable
// and a background process running on with its pid. A copy under a new
// id from the same snapshot has them too, and no access token. Without
// a store both are ErrNoSnapshots; a running sandbox is ErrNotPaused.
func TestSnapshotMaterialize(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			e := testenv.Engine(t)
			var logs testenv.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			cfg := DefaultConfig()
			cfg.Snapshots, cfg.PauseSnapshots = snapshots(t), true
			open := func(node string) *byID {
				reg := cluster.New(cluster.Config{ID: node, Address: "127.0.0.1:1", Heartbeat: time.Second, LostAfter: time.Minute},
					st, slog.New(slog.DiscardHandler))
				table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, reg, log)
				if err != nil {
					t.Fatal(err)
				}
				lm := New(cfg, Deps{Table: table, Engine: e, Fleet: e.Fleet(), Publisher: reg, Log: log})
				t.Cleanup(lm.Close)
				return &byID{Manager: lm, sessions: session.New(session.DefaultConfig(), table, e, e.Fleet(), log)}
			}
			a, b := open("a"), open("b")
			ctx := t.Context()
			memory := tier == runtime.TierGVisor
			var ticker sandbox.ProcessInfo
			if _, err := a.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python",
				Tier: sandbox.Isolation(tier), TimeoutSeconds: 600}); err != nil {
				t.Fatal(err)
			}
			if err := a.SetAccessToken("t", "box", "secret"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.WriteFile(ctx, "t", "box", "/workspace/kept.txt", strings.NewReader("kept\n")); err != nil {
				t.Fatal(err)
			}
			ticker, err = a.StartProcess(ctx, "t", "box", sandbox.StartProcessRequest{
				Cmd: []string{"python3", "-u", "-c", "import time, itertools\nfor i in itertools.count():\n    print(i)\n    time.sleep(0.1)"}})
			if err != nil {
				t.Fatal(err)
			}
			c, err := a.CreateContext(ctx, "t", "box", kernel.ContextOptions{Language: "python"})
			if err != nil {
				t.Fatal(err)
			}
			cell := func(m *byID, id, code string) string {
				t.Helper()
				var evs []sandbox.ContextEvent
				if err := m.RunContext(ctx, "t", id, c.ID, code, time.Minute, func(ev sandbox.ContextEvent) { evs = append(evs, ev) }); err != nil {
					t.Fatalf("run %q: %v", code, err)
				}
				return mainText(evs)
			}
			cell(a, "box", "x = 21")
			s, err := a.Get("t", "box")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Snapshot(ctx, ""); !errors.Is(err, ErrNotPaused) {
				t.Fatalf("snapshot of a running sandbox: %v, want ErrNotPaused", err)
			}
			if err := a.Pause(ctx, "t", "box"); err != nil {
				t.Fatal(err)
			}
			man, err := s.Snapshot(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if man.Meta.Tier != string(tier) || man.Meta.Extra[MetaSandbox] != "box" || man.Meta.Extra[MetaTenant] != "t" ||
				man.Meta.Extra[MetaPause] != "" {
				t.Errorf("snapshot meta: %+v", man.Meta)
			}
			if memory && (len(man.Meta.Contexts) != 1 || len(man.Meta.Processes) != 1 || man.Meta.Processes[0].PID != ticker.PID) {
				t.Errorf("snapshot meta of a sandbox paused with its memory: contexts %+v, processes %+v", man.Meta.Contexts, man.Meta.Processes)
			}
			t.Logf("snapshot %s: %d bytes, %d new chunks (%d bytes stored)", man.ID, man.Stats.LogicalBytes, man.Stats.NewChunks, man.Stats.NewBytes)
			if _, err := b.Materialize(ctx, "t", "box", man.ID); !errors.Is(err, ErrExists) {
				t.Fatalf("materialize an id a node has: %v, want ErrExists", err)
			}
			if err := a.Kill(ctx, "t", "box"); err != nil {
				t.Fatal(err)
			}

			check := func(id string, moved bool) {
				t.Helper()
				if _, err := b.Materialize(ctx, "t", id, man.ID); err != nil {
					t.Fatalf("materialize %s: %v", id, err)
				}
				info, err := b.Sandbox("t", id)
				if err != nil || info.Pause == nil || info.Pause.Memory != memory {
					t.Fatalf("materialized %s: %+v, %v", id, info, err)
				}
				info, err = b.Resume(ctx, "t", id)
				if err != nil {
					t.Fatalf("resume %s: %v", id, err)
				}
				if info.Resume.Memory != memory {
					t.Fatalf("resume %s: %+v\n%s", id, info.Resume, logs.String())
				}
				var buf bytes.Buffer
				if err := b.ReadFile(ctx, "t", id, "/workspace/kept.txt", &buf); err != nil || buf.String() != "kept\n" {
					t.Errorf("%s: a file after the move: %q, %v", id, buf.String(), err)
				}
				token, err := b.AccessToken("t", id)
				if want := map[bool]string{true: "secret", false: ""}[moved]; err != nil || token != want {
					t.Errorf("%s: access token %q, %v; want %q", id, token, err, want)
				}
				if !memory {
					if want := map[bool]int{true: 1}[moved]; info.Resume.ProcessesLost != want {
						t.Errorf("%s: resume of the files only: %+v, want 1 process lost", id, info.Resume)
					}
					return
				}
				if info.Resume.Processes != 1 || info.Resume.Contexts != 1 {
					t.Errorf("%s: resumed %+v, want the ticker and the context kept", id, info.Resume)
				}
				if got := cell(b, id, "x * 2"); got != "42" {
					t.Errorf("%s: x * 2 after the move = %q, want 42", id, got)
				}
				p, err := b.Process(ctx, "t", id, ticker.PID, false)
				if err != nil || !p.Running {
					t.Errorf("%s: the ticker after the move: %+v, %v", id, p, err)
				}
			}
			check("box", true)
			check("copy", false)
			if strings.Contains(logs.String(), "restore a paused sandbox") {
				t.Errorf("a restore failed and fell back to the files:\n%s", logs.String())
			}

			off := open("c")
			off.cfg.Snapshots = nil
			if _, err := off.Materialize(ctx, "t", "other", man.ID); !errors.Is(err, ErrNoSnapshots) {
				t.Errorf("materialize without a store: %v, want ErrNoSnapshots", err)
			}
		})
	}
}
