package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/runtime"
)

// caches keeps languages' shared build caches, one per (language, image),
// warmed on first need by Corral's own plan.
type caches struct {
	dir string

	mu       sync.Mutex
	inflight map[string]*warming
	failed   map[string]time.Time
}

type warming struct {
	done chan struct{}
	err  error
}

// retryWarm is how long a failed warm-up is not retried.
const retryWarm = 10 * time.Minute

func cacheKey(c lang.Cache, img images.Image) string {
	d := strings.TrimPrefix(img.Digest, "sha256:")
	if len(d) > 16 {
		d = d[:16]
	}
	return c.Name + "-" + img.Name + "-" + d
}

// overlay returns the overlay giving a sandbox of img the runner's cache,
// warming it first if needed. Without a cache directory, or while warming
// fails, the sandbox gets an empty cache: slower, never wrong.
func (e *Engine) cacheOverlay(ctx context.Context, r lang.Runner, img images.Image) ([]runtime.Overlay, error) {
	cr, ok := r.(lang.Cacher)
	if !ok {
		return nil, nil
	}
	c := cr.Cache()
	empty := []runtime.Overlay{{Lower: e.emptyDir, Destination: c.Path}}
	if e.caches == nil {
		return empty, nil
	}
	dir, err := e.caches.get(ctx, e, c, img)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.log.Warn("language cache unavailable; running without it", "cache", c.Name, "image", img.Name, "err", err)
		return empty, nil
	}
	return []runtime.Overlay{{Lower: dir, Destination: c.Path}}, nil
}

func (cs *caches) get(ctx context.Context, e *Engine, c lang.Cache, img images.Image) (string, error) {
	key := cacheKey(c, img)
	final := filepath.Join(cs.dir, key)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	cs.mu.Lock()
	if t, ok := cs.failed[key]; ok && time.Since(t) < retryWarm {
		cs.mu.Unlock()
		return "", fmt.Errorf("warming %s failed recently", key)
	}
	w, ok := cs.inflight[key]
	if !ok {
		w = &warming{done: make(chan struct{})}
		cs.inflight[key] = w
		e.bgWG.Add(1)
		go func() {
			defer e.bgWG.Done()
			// Warming outlives the request that triggered it (others wait
			// for the same result) but not the engine.
			wctx, cancel := context.WithTimeout(e.bg, 15*time.Minute)
			defer cancel()
			w.err = e.warm(wctx, c, img, final)
			cs.mu.Lock()
			delete(cs.inflight, key)
			if w.err != nil {
				cs.failed[key] = time.Now()
			}
			cs.mu.Unlock()
			close(w.done)
		}()
	}
	cs.mu.Unlock()
	select {
	case <-w.done:
		if w.err != nil {
			return "", w.err
		}
		return final, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// warm runs the cache's warm plan in a sandbox with the cache writable, then
// installs the result at final.
func (e *Engine) warm(ctx context.Context, c lang.Cache, img images.Image, final string) error {
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := final + ".warming-" + hex.EncodeToString(rnd[:])
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chown(tmp, e.cfg.UID, e.cfg.GID); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	tier := runtime.TierContainer
	if tiers := e.fleet.Tiers(); !slices.Contains(tiers, tier) && len(tiers) > 0 {
		tier = tiers[0]
	}
	sb, err := e.fleet.Create(ctx, tier, runtime.Spec{
		Rootfs: img.Rootfs,
		Mounts: append(append([]runtime.Mount(nil), img.Mounts...), runtime.Mount{Source: tmp, Destination: c.Path, Writable: true}),
		Limits: runtime.Limits{MemoryBytes: 2 << 30, CPUCores: e.cfg.Max.CPUCores, Pids: 512, DiskBytes: 2 << 30},
	}, img, "warming")
	if err != nil {
		return fmt.Errorf("create warming sandbox: %w", err)
	}
	defer e.fleet.DestroyNow(context.WithoutCancel(ctx), sb)
	for _, f := range c.Warm.Files {
		if err := sb.Agent().WriteFile(ctx, f.Path, f.Mode, bytes.NewReader(f.Content)); err != nil {
			return fmt.Errorf("place %s: %w", f.Path, err)
		}
	}
	steps := []*lang.Step{c.Warm.Compile}
	if len(c.Warm.Run.Argv) > 0 {
		steps = append(steps, &c.Warm.Run)
	}
	env := e.baseEnv(img)
	for _, s := range steps {
		if s == nil {
			continue
		}
		out := newCapture(4096, nil)
		st, err := e.step(ctx, sb, stepRun{Step: *s}, env, nil, 10*time.Minute, out)
		if err != nil {
			return err
		}
		if !st.exited || st.code != 0 {
			return fmt.Errorf("warm %s: %v exited %d: %s", c.Name, s.Argv, st.code, out.stderr.Text())
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return nil // another process installed it first
		}
		return fmt.Errorf("install cache: %w", err)
	}
	e.log.Info("warmed language cache", "cache", c.Name, "image", img.Name, "duration_ms", time.Since(start).Milliseconds())
	return nil
}

// Warm prepares every language cache for the named image in the
// background of a server start; errors are logged, executions fall back.
func (e *Engine) Warm(ctx context.Context, image string) {
	img, err := e.images.Resolve(image)
	if err != nil {
		e.log.Warn("warm caches", "image", image, "err", err)
		return
	}
	for _, name := range lang.Names() {
		r, _ := lang.Get(name)
		if _, err := e.cacheOverlay(ctx, r, img); err != nil {
			return
		}
	}
}
