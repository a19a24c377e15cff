// Package testenv gives tests what they need to run real sandboxes: root,
// the pinned runtimes, a static corral binary to act as the agent, and a
// check that nothing is left behind.
package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// PinnedDir is where scripts/deps.sh installs runtimes.
const PinnedDir = "/opt/corral"

// Strict reports whether missing prerequisites fail tests instead of
// skipping them. make test and CI set CORRAL_TEST_STRICT=1, so a root-only
// test never silently skips there.
func Strict() bool { return os.Getenv("CORRAL_TEST_STRICT") == "1" || os.Getenv("CI") != "" }

// Need skips (or, when strict, fails) t when ok is false.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if Strict() {
		t.Fatalf("prerequisite missing: %s", why)
	}
	t.Skipf("prerequisite missing: %s", why)
}

// RequireRoot needs the test to run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "must run as root (namespaces, cgroups, mounts)")
}

// Runtime returns the pinned runc or runsc.
func Runtime(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(PinnedDir, "bin", name)
	_, err := os.Stat(p)
	Need(t, err == nil, p+" missing: run scripts/deps.sh")
	return p
}

// ModuleRoot returns the repository root.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		t.Fatal("not inside the corral module")
	}
	return filepath.Dir(mod)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildOut  []byte
)

// Corral returns a static corral binary built from this checkout, once per
// test process. It serves as the sandbox agent and as the CLI under test.
func Corral(t testing.TB) string {
	t.Helper()
	// A helper process of a test reuses its parent's build.
	if p := os.Getenv("CORRAL_TEST_BINARY"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		root := ModuleRoot(t)
		dir, err := os.MkdirTemp("", "corral-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "corral")
		// corral-agent next to it is the agent corral binds into sandboxes.
		for _, b := range []struct{ out, pkg string }{{buildPath, "./cmd/corral"}, {filepath.Join(dir, "corral-agent"), "./cmd/corral-agent"}} {
			// No VCS stamp: a checkout owned by another user than the one
			// testing (git refuses it) builds all the same.
			cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", b.out, b.pkg)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if buildOut, buildErr = cmd.CombinedOutput(); buildErr != nil {
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatalf("build corral: %v\n%s", buildErr, buildOut)
	}
	return buildPath
}

// Agent returns the agent binary that Corral built next to corral.
func Agent(t testing.TB) string {
	t.Helper()
	return filepath.Join(filepath.Dir(Corral(t)), "corral-agent")
}

// Main runs a package's tests and then Cleanup: a TestMain for packages
// with nothing else to set up.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Cleanup removes the binary Corral built and stops the PostgreSQL, Redis
// and S3 servers tests started; call it from TestMain.
func Cleanup() {
	if buildPath != "" {
		os.RemoveAll(filepath.Dir(buildPath))
	}
	StopPostgres()
	StopRedis()
	StopS3()
}

// Mounts returns the lines of /proc/self/mountinfo that mention s.
func Mounts(s string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		if bytes.Contains(line, []byte(s)) {
			out = append(out, string(line))
		}
	}
	return out
}
