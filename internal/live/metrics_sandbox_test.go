package live

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestMetricsSandbox reads live sandboxes of both tiers: a new one answers
// a reading at once with its limits; then a CPU burner, 100 MiB held and a
// 10 MiB file show in the node's later readings as CPU used, memory and
// disk risen above the first reading's.
func TestMetricsSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MetricsEvery = 200 * time.Millisecond
			r := newOnRuntimes(t, cfg)
			lm := r.lm
			ctx := t.Context()
			s, _, err := lm.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python",
				Tier: sandbox.Isolation(tier), Limits: sandbox.SandboxLimits{MemoryMB: 512, CPUCores: 1, DiskMB: 256}})
			if err != nil {
				t.Fatal(err)
			}
			first, err := s.Metrics(ctx, time.Time{}, time.Time{})
			if err != nil || len(first) != 1 {
				t.Fatalf("a new sandbox answered %v, %v; want one reading", first, err)
			}
			f := first[0]
			t.Logf("new: %+v", f)
			if f.CPUCores != 1 || f.MemoryLimitBytes != 512<<20 || f.DiskLimitBytes <= 200<<20 || f.DiskLimitBytes > 256<<20 ||
				f.MemoryUsedBytes <= 0 || f.MemoryUsedBytes > f.MemoryLimitBytes || f.DiskUsedBytes <= 0 {
				t.Errorf("a new sandbox's reading: %+v", f)
			}

			sampling, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() { lm.Sample(sampling) })
			defer func() { stop(); wg.Wait() }()
			started := time.Now()
			for _, cmd := range [][]string{
				{"python3", "-c", "while True: pass"},
				{"python3", "-c", "import time\nheld = bytearray(100 << 20)\ntime.sleep(600)"},
				{"dd", "if=/dev/zero", "of=/workspace/ten", "bs=1M", "count=10", "conv=fsync"},
			} {
				if _, err := s.Start(ctx, sandbox.StartProcessRequest{Cmd: cmd}); err != nil {
					t.Fatalf("start %q: %v", cmd, err)
				}
			}
			var cpu, mem, disk sandbox.SandboxMetric
			for deadline := time.Now().Add(time.Minute); cpu.CPUUsedPct < 20 || mem.MemoryUsedBytes < f.MemoryUsedBytes+90<<20 ||
				disk.DiskUsedBytes < f.DiskUsedBytes+9<<20; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("within a minute the most CPU was %v%%, memory %d MiB, disk %d MiB (first: %d MiB, %d MiB)",
						cpu.CPUUsedPct, mem.MemoryUsedBytes>>20, disk.DiskUsedBytes>>20, f.MemoryUsedBytes>>20, f.DiskUsedBytes>>20)
				}
				rs, err := s.Metrics(ctx, started, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs {
					cpu = maxBy(cpu, r, r.CPUUsedPct > cpu.CPUUsedPct)
					mem = maxBy(mem, r, r.MemoryUsedBytes > mem.MemoryUsedBytes)
					disk = maxBy(disk, r, r.DiskUsedBytes > disk.DiskUsedBytes)
				}
			}
			t.Logf("most CPU: %+v\nmost memory: %+v\nmost disk: %+v", cpu, mem, disk)
		})
	}
}

func maxBy(cur, r sandbox.SandboxMetric, more bool) sandbox.SandboxMetric {
	if more {
		return r
	}
	return cur
}
