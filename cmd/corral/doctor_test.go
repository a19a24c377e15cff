package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/config"
)

// TestDoctorSaysBeingBuilt: corral doctor reports a runsc being built as
// on its way, with its log, not as a failure.
func TestDoctorSaysBeingBuilt(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, "runsc.lock")
	f, err := os.Create(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buildLog := filepath.Join(dir, "runsc-v1.log")
	if err := os.WriteFile(buildLog, []byte("building\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lc := config.Local{Runsc: filepath.Join(dir, "bin", "runsc"), RunscBuildLock: lock}

	if c := runscCheck(lc); c.ok || c.pending {
		t.Errorf("missing, no build: %+v, want a failure", c)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	c := runscCheck(lc)
	if !c.pending || !strings.Contains(c.info, "being built (see "+buildLog+")") {
		t.Errorf("while building: %+v", c)
	}
}
