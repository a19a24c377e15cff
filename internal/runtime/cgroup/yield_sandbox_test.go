package cgroup_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/testenv"
)

// TestYield: the parent of the sandboxes gets a CPU weight well below the
// kernel's default, which its siblings (corral, the runtimes) keep.
func TestYield(t *testing.T) {
	testenv.RequireRoot(t)
	parent := "/corral-yield-test"
	t.Cleanup(func() { _ = cgroup.Remove(parent) })
	if err := cgroup.Yield(parent); err != nil {
		t.Fatal(err)
	}
	file, def := filepath.Join(cgroup.Root, "cpu", parent, "cpu.shares"), 1024
	if cgroup.Unified() {
		file, def = filepath.Join(cgroup.Root, parent, "cpu.weight"), 100
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || w*4 > def {
		t.Errorf("%s = %q: want at most a quarter of the default %d", file, b, def)
	}
}
