package sandboxes

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestMetrics: through the Go SDK against corral serve, on both tiers, a
// new sandbox answers one reading at once with its limits, and the
// server's own sampler (every 5 s) then shows a CPU burner and 64 MiB held
// in later readings; since bounds them.
func TestMetrics(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	for _, tier := range []sandbox.Tier{sandbox.TierContainer, sandbox.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			ctx := t.Context()
			sb, _, err := client(s).CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: tier, TimeoutSeconds: 300,
				Limits: sandbox.SandboxLimits{MemoryMB: 384, CPUCores: 1, DiskMB: 128}})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Kill(context.Background())
			first, err := sb.Metrics(ctx, time.Time{}, time.Time{})
			if err != nil || len(first) != 1 {
				t.Fatalf("a new sandbox's metrics: %+v, %v; want one reading", first, err)
			}
			f := first[0]
			if f.CPUCores != 1 || f.MemoryLimitBytes != 384<<20 || f.DiskLimitBytes > 128<<20 || f.DiskLimitBytes < 100<<20 {
				t.Errorf("first reading %+v", f)
			}
			started := time.Now()
			for _, cmd := range [][]string{{"python3", "-c", "while True: pass"},
				{"python3", "-c", "import time\nheld = bytearray(64 << 20)\ntime.sleep(300)"}} {
				if _, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: cmd}); err != nil {
					t.Fatal(err)
				}
			}
			var busy, big bool
			for deadline := time.Now().Add(time.Minute); !busy || !big; time.Sleep(time.Second) {
				if time.Now().After(deadline) {
					t.Fatalf("within a minute no reading showed the burner (%v) and 64 MiB held (%v)", busy, big)
				}
				rs, err := sb.Metrics(ctx, started, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs {
					if r.Timestamp.Before(started) {
						t.Errorf("a reading at %v, before since %v", r.Timestamp, started)
					}
					busy = busy || r.CPUUsedPct >= 20
					big = big || r.MemoryUsedBytes >= f.MemoryUsedBytes+60<<20
				}
			}
		})
	}
}
