package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/runtime"
)

// The kernel's side (EBUSY, reclaim, OOM) is exercised on real cgroups by
// runtimetest's UpdateLimits; these tests pin what SetLimits writes, and
// what it leaves as it was, on directories of plain files.

// files makes dir with the given files; a value of "/" makes a directory
// instead, which no write can replace.
func files(t *testing.T, content map[string]string) string {
	t.Helper()
	d := t.TempDir()
	for name, v := range content {
		p := filepath.Join(d, name)
		if v == "/" {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// read returns the files of d that are in want, trimmed.
func read(t *testing.T, d string, want map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for name := range want {
		b, err := os.ReadFile(filepath.Join(d, name))
		if err != nil {
			t.Fatal(err)
		}
		got[name] = strings.TrimSpace(string(b))
	}
	return got
}

func TestSetV1(t *testing.T) {
	mem := map[string]string{"memory.limit_in_bytes": "536870912", "memory.memsw.limit_in_bytes": "536870912"}
	cpu := map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"}
	lower := Limits{MemoryBytes: 100663296, PeriodUS: 100000, CPUQuotaUS: 50000, Pids: 64}
	t.Run("applies", func(t *testing.T) {
		m, c, p := files(t, mem), files(t, cpu), files(t, map[string]string{"pids.max": "128"})
		if err := setV1(m, c, p, lower, true); err != nil {
			t.Fatal(err)
		}
		for _, x := range []struct {
			dir  string
			want map[string]string
		}{
			{m, map[string]string{"memory.limit_in_bytes": "100663296", "memory.memsw.limit_in_bytes": "100663296"}},
			{c, map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"}},
			{p, map[string]string{"pids.max": "64"}},
		} {
			if diff := cmp.Diff(x.want, read(t, x.dir, x.want)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}
	})
	t.Run("all or nothing", func(t *testing.T) {
		// The last write fails: the memory and CPU writes before it are
		// undone.
		m, c, p := files(t, mem), files(t, cpu), files(t, map[string]string{"pids.max": "/"})
		if err := setV1(m, c, p, lower, true); err == nil {
			t.Fatal("setV1 with an unwritable pids.max succeeded")
		} else if errors.Is(err, runtime.ErrLimitBelowUsage) {
			t.Fatalf("a failed write reported as %v", err)
		}
		if diff := cmp.Diff(mem, read(t, m, mem)); diff != "" {
			t.Errorf("memory not restored (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(cpu, read(t, c, cpu)); diff != "" {
			t.Errorf("cpu not restored (-want +got):\n%s", diff)
		}
	})
}

func TestSetV2(t *testing.T) {
	before := map[string]string{"memory.max": "536870912", "memory.swap.max": "0", "cpu.max": "100000 100000", "pids.max": "128"}
	lower := Limits{MemoryBytes: 100663296, PeriodUS: 100000, CPUQuotaUS: 50000, Pids: 64}
	t.Run("applies", func(t *testing.T) {
		d := files(t, with(before, "memory.current", "52428800", "memory.reclaim", ""))
		if err := setV2(d, lower, true); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"memory.max": "100663296", "memory.swap.max": "0", "cpu.max": "50000 100000", "pids.max": "64", "memory.reclaim": ""}
		if diff := cmp.Diff(want, read(t, d, want)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("below usage", func(t *testing.T) {
		// 200 MiB held that reclaim does not free (a plain file does not
		// change): refused, after asking for the 104 MiB above the limit,
		// and nothing is written.
		d := files(t, with(before, "memory.current", "209715200", "memory.reclaim", ""))
		err := setV2(d, lower, true)
		var below *runtime.LimitBelowUsageError
		if !errors.As(err, &below) || !errors.Is(err, runtime.ErrLimitBelowUsage) {
			t.Fatalf("setV2 = %v, want a *runtime.LimitBelowUsageError", err)
		}
		if *below != (runtime.LimitBelowUsageError{Resource: "memory", Limit: 100663296, Usage: 209715200}) {
			t.Errorf("error %+v", *below)
		}
		want := with(before, "memory.reclaim", "109051904")
		if diff := cmp.Diff(want, read(t, d, want)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("all or nothing", func(t *testing.T) {
		d := files(t, with(before, "memory.current", "52428800", "pids.max", "/"))
		if err := setV2(d, lower, true); err == nil {
			t.Fatal("setV2 with an unwritable pids.max succeeded")
		}
		want := map[string]string{"memory.max": "536870912", "memory.swap.max": "0", "cpu.max": "100000 100000"}
		if diff := cmp.Diff(want, read(t, d, want)); diff != "" {
			t.Errorf("not restored (-want +got):\n%s", diff)
		}
	})
}

// with returns m with the key/value pairs kv set.
func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestUsage(t *testing.T) {
	stat := func(lines ...string) string { return strings.Join(lines, "\n") }
	t.Run("v1", func(t *testing.T) {
		cpu := files(t, map[string]string{"cpuacct.usage": "1500000000"})
		mem := files(t, map[string]string{"memory.usage_in_bytes": "300000000",
			"memory.stat":           stat("cache 5", "rss 6", "total_cache 120000000", "total_rss 150000000", "total_shmem 20000000"),
			"memory.limit_in_bytes": "536870912"})
		got, err := usageV1(cpu, mem)
		if err != nil {
			t.Fatal(err)
		}
		want := Usage{CPUNanos: 1500000000, MemoryBytes: 200000000, CacheBytes: 100000000, MemoryLimitBytes: 536870912}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		// No limit: the largest page-aligned int64.
		if err := os.WriteFile(filepath.Join(mem, "memory.limit_in_bytes"), []byte("9223372036854771712\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err = usageV1(cpu, mem); err != nil || got.MemoryLimitBytes != 0 {
			t.Errorf("no limit read as %d (%v), want 0", got.MemoryLimitBytes, err)
		}
	})
	t.Run("v2", func(t *testing.T) {
		d := files(t, map[string]string{"cpu.stat": stat("usage_usec 2500", "user_usec 2000", "system_usec 500"),
			"memory.current": "10000", "memory.stat": stat("anon 4000", "file 7000", "shmem 1000"), "memory.max": "max"})
		got, err := usageV2(d)
		if err != nil {
			t.Fatal(err)
		}
		want := Usage{CPUNanos: 2500000, MemoryBytes: 4000, CacheBytes: 6000}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := usageV2(t.TempDir()); err == nil {
			t.Error("a directory without cgroup files read without an error")
		}
	})
}
