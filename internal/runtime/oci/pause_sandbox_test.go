package oci_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/oci"
)

// stdout collects a process's stdout and signals each write.
type stdout struct {
	mu    sync.Mutex
	b     strings.Builder
	wrote chan struct{}
}

func (o *stdout) Stdout(p []byte) {
	o.mu.Lock()
	o.b.Write(p)
	o.mu.Unlock()
	select {
	case o.wrote <- struct{}{}:
	default:
	}
}
func (o *stdout) Stderr([]byte) {}
func (o *stdout) Status([]byte) {}

func (o *stdout) await(t testing.TB, want string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		o.mu.Lock()
		got := o.b.String()
		o.mu.Unlock()
		if strings.HasSuffix(got, want) {
			return
		}
		select {
		case <-o.wrote:
		case <-deadline:
			t.Fatalf("stdout %q, want it to end with %q", got, want)
		}
	}
}

// TestPauseFailureRunsOn: when runsc checkpoint fails, Pause says so, the
// sandbox runs on with its agent resumed on the same stream (a process
// keeps its memory and its handle), and nothing saved is left.
func TestPauseFailureRunsOn(t *testing.T) {
	f := newFixture(t, runtime.TierGVisor, t.TempDir())
	oci.SetCheckpointFlags(t, []string{"--compression=no-such-level"})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sb, err := f.rt.Create(ctx, runtime.Spec{Rootfs: f.env.Rootfs, Mounts: f.env.Mounts,
		Limits:    runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 64, DiskBytes: 64 << 20},
		Workspace: filepath.Join(dir, "disk.img")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
		if left := f.env.NoLeftovers(sb.ID()); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}()
	out := &stdout{wrote: make(chan struct{}, 1)}
	p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: []string{"python3", "-u", "-c", "import sys\nfor line in sys.stdin:\n    exec(line)\n"},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: true, Persistent: true}, out)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("x = 42\nprint(x)\n")); err != nil {
		t.Fatal(err)
	}
	out.await(t, "42\n")
	image := filepath.Join(dir, "paused")
	if err := sb.(runtime.Pauser).Pause(ctx, image); err == nil {
		t.Fatal("pause with a checkpoint that cannot run succeeded")
	}
	if _, err := os.Stat(image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed pause left %s: %v", image, err)
	}
	if err := p.WriteStdin([]byte("print(x + 1)\n")); err != nil {
		t.Fatalf("after a failed pause: %v", err)
	}
	out.await(t, "43\n")
}

// TestRestoreInAnotherRuntime: what Pause saved is all a restore needs: a
// runtime with a state of its own (another corral process, after a
// restart) restores the sandbox, and a process keeps its memory.
func TestRestoreInAnotherRuntime(t *testing.T) {
	f1 := newFixture(t, runtime.TierGVisor, t.TempDir())
	f2 := newFixture(t, runtime.TierGVisor, t.TempDir())
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	spec := runtime.Spec{Rootfs: f1.env.Rootfs, Mounts: f1.env.Mounts,
		Limits:    runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 64, DiskBytes: 64 << 20},
		Workspace: filepath.Join(dir, "disk.img")}
	sb, err := f1.rt.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	out := &stdout{wrote: make(chan struct{}, 1)}
	p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: []string{"python3", "-u", "-c", "import sys\nfor line in sys.stdin:\n    exec(line)\n"},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: true, Persistent: true}, out)
	if err != nil {
		sb.Destroy(ctx)
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("x = 'kept'\nprint(x)\n")); err != nil {
		t.Fatal(err)
	}
	out.await(t, "kept\n")
	image := filepath.Join(dir, "paused")
	if err := sb.(runtime.Pauser).Pause(ctx, image); err != nil {
		sb.Destroy(ctx)
		t.Fatal(err)
	}
	sb2, err := f2.rt.Restore(ctx, spec, image)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb2.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
		if left := f2.env.NoLeftovers(sb2.ID()); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}()
	if _, err := sb2.Agent().Ready(ctx); err != nil {
		t.Fatal(err)
	}
	out2 := &stdout{wrote: make(chan struct{}, 1)}
	p2, err := sb2.Agent().Attach(p.ID(), out2)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.WriteStdin([]byte("print(x.upper())\n")); err != nil {
		t.Fatal(err)
	}
	out2.await(t, "KEPT\n")
}

// BenchmarkPauseRestore pauses and restores one idle python sandbox b.N
// times, each cycle on the image the last left, and reports what a cycle
// takes, as medians (a shared machine's load comes in bursts): the whole
// Pause and Restore, the restored python's first answer, and the saved
// image's size.
func BenchmarkPauseRestore(b *testing.B) {
	f := newFixture(b, runtime.TierGVisor, b.TempDir())
	dir := b.TempDir()
	ctx := context.Background()
	spec := runtime.Spec{Rootfs: f.env.Rootfs, Mounts: f.env.Mounts,
		Limits:    runtime.Limits{MemoryBytes: 512 << 20, CPUCores: 1, Pids: 128, DiskBytes: 256 << 20},
		Workspace: filepath.Join(dir, "disk.img")}
	sb, err := f.rt.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { sb.Destroy(ctx) }()
	out := &stdout{wrote: make(chan struct{}, 1)}
	p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: []string{"python3", "-u", "-c", "import sys\nfor line in sys.stdin:\n    exec(line)\n"},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: true, Persistent: true}, out)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.WriteStdin([]byte("x = 0\nprint(x)\n")); err != nil {
		b.Fatal(err)
	}
	out.await(b, "0\n")
	var pause, restore, answer []time.Duration
	var size int64
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		image := filepath.Join(dir, "paused")
		start := time.Now()
		if err := sb.(runtime.Pauser).Pause(ctx, image); err != nil {
			b.Fatal(err)
		}
		pause = append(pause, time.Since(start))
		entries, _ := os.ReadDir(image)
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				size += info.Size()
			}
		}
		start = time.Now()
		if sb, err = f.rt.Restore(ctx, spec, image); err != nil {
			b.Fatal(err)
		}
		restore = append(restore, time.Since(start))
		out = &stdout{wrote: make(chan struct{}, 1)}
		if p, err = sb.Agent().Attach(p.ID(), out); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := p.WriteStdin([]byte("x += 1\nprint(x)\n")); err != nil {
			b.Fatal(err)
		}
		out.await(b, fmt.Sprintf("%d\n", i))
		answer = append(answer, time.Since(start))
	}
	b.ReportMetric(median(pause), "pause-p50-ms")
	b.ReportMetric(median(restore), "restore-p50-ms")
	b.ReportMetric(median(answer), "answer-p50-ms")
	b.ReportMetric(float64(size)/(1<<20)/float64(b.N), "image-MiB")
}

// median returns the median of d in milliseconds.
func median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}
