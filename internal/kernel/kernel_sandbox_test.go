//go:build linux

package kernel_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// The tests in this file run contexts in real sandboxes (runc and runsc)
// of the python image, built into the machine's test image directory
// (`corral image build --image-dir /var/cache/corral/test-images python`)
// by the first test that needs it.

var sandboxLimits = runtime.Limits{MemoryBytes: 1 << 30, CPUCores: 1, Pids: 256, DiskBytes: 256 << 20}

// pythonSandbox is a live sandbox of the python image with contexts.
type pythonSandbox struct {
	localBox
	sb runtime.Sandbox
}

// pythonSandboxes returns a python sandbox of each tier, destroyed at the
// end of t.
func pythonSandboxes(t testing.TB) map[runtime.Tier]*pythonSandbox {
	t.Helper()
	testenv.PythonImage(t) // built on first use: a fresh machine has none yet
	img, err := testenv.ImageStore(t).Resolve("python")
	if err != nil {
		t.Fatalf("the python test image: %v", err)
	}
	out := map[runtime.Tier]*pythonSandbox{}
	for _, rt := range testenv.Runtimes(t, t.TempDir()) {
		out[rt.Tier()] = newPythonSandbox(t, rt, img)
	}
	return out
}

func newPythonSandbox(t testing.TB, rt runtime.Runtime, img images.Image) *pythonSandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := rt.Create(ctx, runtime.Spec{Rootfs: img.Rootfs, Mounts: img.Mounts, Limits: sandboxLimits})
	if err != nil {
		t.Fatalf("create %s sandbox: %v", rt.Tier(), err)
	}
	env := append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"}, img.Env...)
	k := kernel.New(sb.Agent(), kernel.Options{Env: env, Grace: time.Second})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := k.Close(ctx); err != nil {
			t.Errorf("close contexts: %v", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return &pythonSandbox{localBox: localBox{k: k}, sb: sb}
}

func TestSandboxContexts(t *testing.T) {
	for tier, s := range pythonSandboxes(t) {
		t.Run(string(tier), func(t *testing.T) {
			ctx := t.Context()
			id := s.create(t, kernel.ContextOptions{})
			s.run(t, id, "x = 21")
			if got := s.run(t, id, "x * 2").main(); got != "42" {
				t.Errorf("x * 2: %q, want 42", got)
			}
			for i := range 100 {
				if got := s.run(t, id, "x += 1\nx").main(); got != strconv.Itoa(22+i) {
					t.Fatalf("run %d: %q", i, got)
				}
			}
			other := s.create(t, kernel.ContextOptions{})
			if e := s.run(t, other, "x").err(); e == nil || e.Name != "NameError" {
				t.Errorf("x in a second context: %+v", e)
			}
			f, err := s.k.Fork(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.run(t, f.ID, "x").main(); got != "121" {
				t.Errorf("x in the fork: %q, want 121", got)
			}
			s.run(t, f.ID, "x = -1")
			if a, b := s.run(t, id, "x").main(), s.run(t, f.ID, "x").main(); a != "121" || b != "-1" {
				t.Errorf("after diverging: original %q, fork %q", a, b)
			}

			c := s.run(t, id, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
			r := c.of(sandbox.ContextEventResult)
			if len(r) != 1 || !strings.Contains(r[0].Data["text/html"], "<table") || !strings.Contains(r[0].Data["text/plain"], "a  b") {
				t.Errorf("DataFrame: %+v", c.events)
			}

			c = s.run(t, id, "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()")
			r = c.of(sandbox.ContextEventResult)
			if len(r) != 1 {
				t.Fatalf("plt.show(): %+v, want one result", c.events)
			}
			checkPNG(t, r[0].Data["image/png"])
			if c := s.run(t, id, "plt.plot([3, 1])"); len(c.of(sandbox.ContextEventResult)) != 2 {
				t.Errorf("a figure left open: %+v, want the value and the figure", c.events)
			} else {
				checkPNG(t, c.of(sandbox.ContextEventResult)[1].Data["image/png"])
			}

			c = s.run(t, id, "display('one')\ndisplay({'two': 2})")
			if r := c.of(sandbox.ContextEventResult); len(r) != 2 || r[0].Data["text/plain"] != "'one'" || r[1].Data["text/plain"] != "{'two': 2}" {
				t.Errorf("two display() calls: %+v", c.events)
			}

			e := s.run(t, id, "def f():\n    raise ValueError('bad value')\nf()").err()
			if e == nil || e.Name != "ValueError" || e.Value != "bad value" || !strings.Contains(strings.Join(e.Traceback, ""), "raise ValueError('bad value')") {
				t.Errorf("exception: %+v", e)
			}
		})
	}
}

// checkPNG checks that b64 is a PNG image that decodes.
func checkPNG(t *testing.T, b64 string) {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("image/png: %v, starts %q", err, b[:min(len(b), 8)])
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode PNG: %v", err)
	}
	if bd := img.Bounds(); bd.Dx() < 100 || bd.Dy() < 100 {
		t.Errorf("PNG of %v", bd)
	}
}

func TestSandboxStreamingInterruptTimeout(t *testing.T) {
	for tier, s := range pythonSandboxes(t) {
		t.Run(string(tier), func(t *testing.T) {
			id := s.create(t, kernel.ContextOptions{})
			// The first line arrives while the cell sleeps, seconds before
			// its end.
			var first, end time.Time
			ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
			defer cancel()
			err := s.k.Run(ctx, id, "import time\nprint('first')\ntime.sleep(2)\nprint('second')", 0, func(ev sandbox.ContextEvent) {
				switch {
				case ev.Type == sandbox.ContextEventStdout && ev.Text == "first\n":
					first = time.Now()
				case ev.Type == sandbox.ContextEventEndOfExecution:
					end = time.Now()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if first.IsZero() || end.Sub(first) < time.Second {
				t.Errorf("first line at %v, end at %v: want the line a second or more before the end", first, end)
			}

			s.run(t, id, "x = 1")
			evs, errc := s.runAsync(id, "import time\nprint('sleeping', flush=True)\ntime.sleep(600)", 0)
			next(t, evs, sandbox.ContextEventStdout)
			if err := s.k.Interrupt(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			if e := next(t, evs, sandbox.ContextEventError); e.Name != "KeyboardInterrupt" {
				t.Errorf("interrupt: %+v", e)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if got := s.run(t, id, "x").main(); got != "1" {
				t.Errorf("after the interrupt: %q", got)
			}
			c := s.runTimeout(t, id, "while True:\n    pass", time.Second)
			if e := c.err(); e == nil || e.Name != kernel.ErrorTimeout {
				t.Errorf("timeout: %+v", c.events)
			}
			if got := s.run(t, id, "x").main(); got != "1" {
				t.Errorf("after the timeout: %q", got)
			}
		})
	}
}

// BenchmarkSandbox measures, per tier: a cell `x + 1` (Run), a fork of a
// context (Fork), and as the baseline the start of a bare `python3 -c
// pass` through the agent in the same sandbox (Spawn); and on runc the
// memory of the sandbox idle with one context (Idle: the sandbox cgroup's
// memory.current and the sum of its processes' PSS, with one context and,
// for comparison, before the first).
func BenchmarkSandbox(b *testing.B) {
	for tier, s := range pythonSandboxes(b) {
		var bare, bareErr = int64(0), error(nil)
		if tier == runtime.TierContainer {
			bare, _, bareErr = sandboxMemory(s.sb)
		}
		id := s.create(b, kernel.ContextOptions{})
		s.run(b, id, "x = 1")
		if tier == runtime.TierContainer {
			b.Run(string(tier)+"/Idle", func(b *testing.B) {
				cur, pss, err := sandboxMemory(s.sb)
				if err != nil || bareErr != nil {
					b.Fatal(err, bareErr)
				}
				for b.Loop() {
				}
				b.ReportMetric(float64(cur)/(1<<20), "MB-cgroup")
				b.ReportMetric(float64(pss)/(1<<20), "MB-PSS")
				b.ReportMetric(float64(bare)/(1<<20), "MB-cgroup-no-context")
			})
		}
		b.Run(string(tier)+"/Spawn", func(b *testing.B) {
			for b.Loop() {
				p, err := s.sb.Agent().Start(b.Context(), agent.StartRequest{Argv: []string{"python3", "-c", "pass"},
					Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace"}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if st, err := p.Wait(b.Context()); err != nil || st.Code != 0 {
					b.Fatal(st, err)
				}
			}
			reportMS(b)
		})
		b.Run(string(tier)+"/Run", func(b *testing.B) {
			for b.Loop() {
				if got := s.run(b, id, "x + 1").main(); got != "2" {
					b.Fatalf("x + 1: %q", got)
				}
			}
			reportMS(b)
		})
		b.Run(string(tier)+"/Fork", func(b *testing.B) {
			for b.Loop() {
				f, err := s.k.Fork(b.Context(), id)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.k.Delete(b.Context(), f.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			reportMS(b)
		})
	}
}

func reportMS(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// sandboxMemory returns a runc sandbox's cgroup memory use (memory.current,
// or v1's memory.usage_in_bytes: with the page cache it charged) and the
// sum of its processes' PSS.
func sandboxMemory(sb runtime.Sandbox) (current, pss int64, err error) {
	mu, ok := sb.(interface{ MemoryUsage() (int64, error) })
	if !ok {
		return 0, 0, fmt.Errorf("%T does not report its memory", sb)
	}
	if current, err = mu.MemoryUsage(); err != nil {
		return 0, 0, err
	}
	dir := filepath.Join(cgroup.Root, testenv.CgroupParent, sb.ID())
	if !cgroup.Unified() {
		dir = filepath.Join(cgroup.Root, "memory", testenv.CgroupParent, sb.ID())
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0, 0, err
	}
	for _, pid := range strings.Fields(string(procs)) {
		f, err := os.Open(filepath.Join("/proc", pid, "smaps_rollup"))
		if err != nil {
			continue // ended meanwhile
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				pss += kb << 10
			}
		}
		f.Close()
	}
	return current, pss, nil
}
