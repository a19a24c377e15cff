package testserver

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/testenv"
)

// RunscBuild stands for scripts/deps.sh building runsc in the background,
// in a directory of the test's: a server started with Flags looks for
// runsc where the build installs it, and for the build's lock, which this
// test holds while the build "runs".
type RunscBuild struct {
	// Flags point corral serve at the build (add them to Options.Extra).
	Flags []string
	// Dir holds the lock, the build's log and bin/runsc once installed.
	Dir string
	// Log is the build's log, which only the server's log may name.
	Log string

	t    testing.TB
	lock *os.File
}

// NewRunscBuild returns a build that has not started: nothing holds the
// lock and runsc is not installed.
func NewRunscBuild(t testing.TB) *RunscBuild {
	t.Helper()
	dir := t.TempDir()
	b := &RunscBuild{Dir: dir, Log: filepath.Join(dir, "runsc-test.log"), t: t,
		Flags: []string{"--runsc", filepath.Join(dir, "bin", "runsc"), "--runsc-build-lock", filepath.Join(dir, "runsc.lock")}}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Log, []byte("building runsc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.release)
	return b
}

// Start begins a build: the lock is held until Fail or Install.
func (b *RunscBuild) Start() {
	b.t.Helper()
	f, err := os.OpenFile(filepath.Join(b.Dir, "runsc.lock"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		b.t.Fatalf("take the build lock: %v", err)
	}
	b.lock = f
}

// Fail ends the build without installing runsc.
func (b *RunscBuild) Fail() { b.release() }

// Install installs the pinned runsc, atomically as scripts/deps.sh does,
// then ends the build.
func (b *RunscBuild) Install() {
	b.t.Helper()
	src, err := os.Open(testenv.Runtime(b.t, "runsc"))
	if err != nil {
		b.t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(b.Dir, "bin", "runsc")
	tmp, err := os.OpenFile(dst+".new", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		b.t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		b.t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		b.t.Fatal(err)
	}
	b.release()
}

func (b *RunscBuild) release() {
	if b.lock != nil {
		b.lock.Close() // drops the flock
		b.lock = nil
	}
}
