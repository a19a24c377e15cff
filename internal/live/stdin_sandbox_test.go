package live

import (
	"log/slog"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestStdinNotReadingSandbox: the stdin bound on real sandboxes of both
// tiers (notReading): 4 MiB to a process that does not read ends with the
// count accepted, and the process gets exactly those bytes once it reads.
func TestStdinNotReadingSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	const stall = time.Second
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			e := testenv.Engine(t)
			var logs testenv.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			reg := registry(t)
			table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, reg, log)
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.StdinStall = stall
			lm := New(cfg, Deps{Table: table, Engine: e, Fleet: e.Fleet(), Publisher: reg, Log: log})
			t.Cleanup(lm.Close)
			m := &byID{Manager: lm, sessions: session.New(session.DefaultConfig(), table, e, e.Fleet(), log)}
			if _, err := m.Create(t.Context(), "t", sandbox.CreateSandboxRequest{SandboxID: "box", Tier: sandbox.Isolation(tier)}); err != nil {
				t.Fatal(err)
			}
			notReading(t, m, "box", stall)
		})
	}
}
