package live

import (
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
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
			cfg := DefaultConfig()
			cfg.StdinStall = stall
			r := newOnRuntimes(t, cfg)
			m := r.m
			if _, err := m.Create(t.Context(), "t", sandbox.CreateSandboxRequest{SandboxID: "box", Tier: sandbox.Isolation(tier)}); err != nil {
				t.Fatal(err)
			}
			notReading(t, m, "box", stall)
		})
	}
}
