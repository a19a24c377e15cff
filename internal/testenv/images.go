package testenv

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/images"
)

// ImageDir keeps built images between test runs on a machine (outside the
// clone), so the suite builds the python image once per machine and
// reuses it after.
func ImageDir() string {
	if d := os.Getenv("CORRAL_TEST_IMAGES"); d != "" {
		return d
	}
	return "/var/cache/corral/test-images"
}

// ImageStore returns the store over ImageDir.
func ImageStore(t testing.TB) *images.Store {
	t.Helper()
	return images.New(images.Config{Dir: ImageDir(), UID: 1000, GID: 1000, Log: testLogger(t)})
}

// ImageEngine is Engine with images from imgs (an *images.Store, say)
// instead of a fresh host-only store.
func ImageEngine(t testing.TB, imgs engine.ImageResolver, mutate ...func(*engine.Config)) *engine.Engine {
	t.Helper()
	dir := DataDir(t)
	cfg := engine.DefaultConfig()
	cfg.CacheDir = CacheDir()
	cfg.UID, cfg.GID = 1000, 1000
	for _, m := range mutate {
		m(&cfg)
	}
	return newEngine(t, cfg, dir, imgs, testLogger(t))
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// PythonImage makes sure the python image (pandas, matplotlib: what code
// contexts and E2B's code interpreter are tested with) is in ImageDir,
// building it through the CLI if it is not: minutes the first time on a
// machine, whichever test needs it first; nothing after.
func PythonImage(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if _, err := ImageStore(t).Resolve("python"); err == nil {
		return
	}
	start := time.Now()
	cmd := exec.CommandContext(context.Background(), Corral(t), "image", "build", "--image-dir", ImageDir(), "python")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("corral image build python: %v\n%s", err, lastLines(out, 20))
	}
	t.Logf("built the python image in %s", time.Since(start).Round(time.Second))
}

// lastLines is the end of a command's output.
func lastLines(out []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n"))
	return bytes.Join(lines[max(0, len(lines)-n):], []byte("\n"))
}
