package testenv

import (
	"log/slog"
	"os"
	"testing"

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
	dir := t.TempDir()
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
