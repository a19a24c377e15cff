package runtimetest

import (
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime"
)

// Usage checks a runtime.Meter's readings against what a program does in
// its sandbox: CPU burnt, memory held and a file written each show in the
// reading after it, and the limits are the sandbox's.
func Usage(t *testing.T, rt runtime.Runtime, env Env) {
	sb := create(t, rt, env, defaultLimits)
	m, ok := sb.(runtime.Meter)
	if !ok {
		t.Fatalf("a %T is not a runtime.Meter", sb)
	}
	read := func() runtime.Usage {
		t.Helper()
		u, err := m.Usage(t.Context())
		if err != nil {
			t.Fatalf("usage: %v", err)
		}
		return u
	}
	before := read()
	if before.MemoryLimitBytes != defaultLimits.MemoryBytes {
		t.Errorf("memory limit %d, want %d", before.MemoryLimitBytes, defaultLimits.MemoryBytes)
	}
	// The file system's own metadata takes part of the disk's size.
	if before.DiskLimitBytes <= defaultLimits.DiskBytes/2 || before.DiskLimitBytes > defaultLimits.DiskBytes {
		t.Errorf("disk size %d, want about %d", before.DiskLimitBytes, defaultLimits.DiskBytes)
	}
	if before.DiskBytes <= 0 || before.DiskBytes >= before.DiskLimitBytes/2 {
		t.Errorf("an empty disk holds %d of %d bytes", before.DiskBytes, before.DiskLimitBytes)
	}

	// A second of CPU time by the process's own clock, as the host's other
	// work may leave the sandbox less than a core. gVisor's clock charges
	// its tasks by ticks, not by the host's count (0.63 s on the host for
	// its second here), so a quarter of it is the least expected; an idle
	// sandbox uses a few milliseconds meanwhile.
	start := time.Now()
	if st, out := Exec(t, sb, "python3", "-c", "import time\nwhile time.process_time() < 1: pass"); st.Code != 0 {
		t.Fatalf("the burner: %+v %q", st, out.ErrString())
	}
	burnt := read().CPUNanos - before.CPUNanos
	if burnt < int64(time.Second/4) || burnt > int64(time.Since(start))*int64(defaultLimits.CPUCores+1) {
		t.Errorf("a burner of a CPU second used %v of CPU in %v", time.Duration(burnt), time.Since(start))
	}

	// 100 MiB held.
	h := HoldMemory(t, sb, 100)
	held := read()
	t.Logf("before %+v; with 100 MiB held %+v", before, held)
	if grew := held.MemoryBytes - before.MemoryBytes; grew < 90<<20 || held.MemoryBytes > held.MemoryLimitBytes {
		t.Errorf("memory %d MiB with 100 MiB held, %d MiB before", held.MemoryBytes>>20, before.MemoryBytes>>20)
	}
	if st, _, err := h.Grow(t, 0); err != nil || st.Code != 0 {
		t.Errorf("the holder ended: %+v %v", st, err)
	}

	// 10 MiB written (and synced: gVisor may hold writes back).
	if st, out := Exec(t, sb, "dd", "if=/dev/zero", "of=/workspace/ten", "bs=1M", "count=10", "conv=fsync"); st.Code != 0 {
		t.Fatalf("dd: %+v %q", st, out.ErrString())
	}
	if grew := read().DiskBytes - before.DiskBytes; grew < 9<<20 || grew > 12<<20 {
		t.Errorf("the disk grew by %d bytes with a 10 MiB file", grew)
	}
}
