package cgroup_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/testenv"
)

// TestCountersSeeChanges: Counters reads through files it keeps open, and
// what it reads is the cgroup as it is at each read, not as it was when a
// file was opened: a peak that grew, a fork refused, a peak reset. After
// Close it reads as Read does.
func TestCountersSeeChanges(t *testing.T) {
	testenv.RequireRoot(t)
	path := "/corral-counters-test"
	memDir, pidsDir := filepath.Join(cgroup.Root, "memory", path), filepath.Join(cgroup.Root, "pids", path)
	procs := []string{filepath.Join(memDir, "cgroup.procs"), filepath.Join(pidsDir, "cgroup.procs")}
	if cgroup.Unified() {
		memDir, pidsDir = filepath.Join(cgroup.Root, path), filepath.Join(cgroup.Root, path)
		procs = []string{filepath.Join(memDir, "cgroup.procs")}
	}
	for _, d := range []string{memDir, pidsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = cgroup.Remove(path) })
	c := cgroup.NewCounters(path)
	t.Cleanup(func() { _ = c.Close() })
	before, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	// A shell that joins the cgroup, then holds 32 MiB.
	join := ""
	for _, p := range procs {
		join += "echo $$ > " + p + "; "
	}
	run := func(script string) {
		t.Helper()
		out, err := exec.Command("/bin/sh", "-c", join+script).CombinedOutput()
		if err != nil {
			t.Logf("%s: %v: %s", script, err, out)
		}
	}
	run(`x=$(head -c 33554432 /dev/zero | tr '\0' a); echo ${#x} >/dev/null`)
	grown, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if grown.PeakMemoryBytes < before.PeakMemoryBytes+16<<20 {
		t.Errorf("peak %d after holding 32 MiB, was %d: the kept file was not read anew", grown.PeakMemoryBytes, before.PeakMemoryBytes)
	}
	if err := os.WriteFile(filepath.Join(pidsDir, "pids.max"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	run(`/bin/true; /bin/true`) // the shell is the one task allowed: its forks fail
	refused, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if refused.PidsLimitHits <= grown.PidsLimitHits {
		t.Errorf("pids limit hits %d after refused forks, were %d", refused.PidsLimitHits, grown.PidsLimitHits)
	}
	if err := c.ResetPeak(); err != nil {
		if cgroup.Unified() {
			t.Skipf("this kernel cannot reset memory.peak: %v", err)
		}
		t.Fatal(err)
	}
	reset, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if reset.PeakMemoryBytes >= grown.PeakMemoryBytes-16<<20 {
		t.Errorf("peak %d after a reset with nothing running, was %d", reset.PeakMemoryBytes, grown.PeakMemoryBytes)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed, err := c.Read()
	if err != nil {
		t.Fatalf("read after Close: %v", err)
	}
	once, err := cgroup.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if closed.PidsLimitHits != once.PidsLimitHits || closed.OOMKills != once.OOMKills {
		t.Errorf("after Close %+v, Read %+v", closed, once)
	}
}
