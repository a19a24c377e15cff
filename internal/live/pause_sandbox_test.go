package live

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestPauseSandbox pauses and resumes a live python sandbox on real
// runtimes, several times. Both tiers keep its files. gVisor keeps its
// memory: a context's x = 21 gives x * 2 = 42 after every resume, and a
// background process that prints a line every 100 ms runs on with the
// same pid, its output buffer growing on. runc keeps the files only: the
// process ends as sandbox_paused and the resume says it was lost. It logs
// the pause and resume times and the saved image's size (medians).
func TestPauseSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			r := newOnRuntimes(t, DefaultConfig())
			e, table, logs, m := r.e, r.table, r.logs, r.m
			ctx := t.Context()
			memory := tier == runtime.TierGVisor
			if _, err := m.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python",
				Tier: sandbox.Isolation(tier), TimeoutSeconds: 600}); err != nil {
				t.Fatal(err)
			}
			if _, err := m.WriteFile(ctx, "t", "box", "/workspace/kept.txt", strings.NewReader("kept\n")); err != nil {
				t.Fatal(err)
			}
			ticker, err := m.StartProcess(ctx, "t", "box", sandbox.StartProcessRequest{
				Cmd: []string{"python3", "-u", "-c", "import time, itertools\nfor i in itertools.count():\n    print(i)\n    time.sleep(0.1)"}})
			if err != nil {
				t.Fatal(err)
			}
			c, err := m.CreateContext(ctx, "t", "box", kernel.ContextOptions{Language: "python"})
			if err != nil {
				t.Fatal(err)
			}
			cell := func(code string) []sandbox.ContextEvent {
				t.Helper()
				var evs []sandbox.ContextEvent
				if err := m.RunContext(ctx, "t", "box", c.ID, code, time.Minute, func(ev sandbox.ContextEvent) { evs = append(evs, ev) }); err != nil {
					t.Fatalf("run %q: %v", code, err)
				}
				return evs
			}
			cell("x = 21")
			lines := func() int {
				out, err := m.ProcessOutput("t", "box", ticker.PID)
				if err != nil {
					t.Fatal(err)
				}
				evs, _, _ := out.Events(0)
				return strings.Count(stdout(evs), "\n")
			}
			// waitLines waits for the ticker to print past n lines.
			waitLines := func(n int) {
				t.Helper()
				out, _ := m.ProcessOutput("t", "box", ticker.PID)
				deadline := time.After(time.Minute)
				for {
					evs, changed, ended := out.Events(0)
					if strings.Count(stdout(evs), "\n") > n {
						return
					}
					if ended {
						t.Fatalf("the ticker ended: %+v", evs[len(evs)-1])
					}
					select {
					case <-changed:
					case <-deadline:
						t.Fatalf("the ticker printed no line past %d in a minute", n)
					}
				}
			}
			waitLines(3)

			rounds := 1
			if memory {
				rounds = 5
			}
			var pauses, resumes []time.Duration
			var sizes []int64
			for range rounds {
				start := time.Now()
				if err := m.Pause(ctx, "t", "box"); err != nil {
					t.Fatalf("pause: %v", err)
				}
				pauses = append(pauses, time.Since(start))
				info, err := m.Sandbox("t", "box")
				if err != nil || info.Pause == nil || info.Pause.Memory != memory {
					t.Fatalf("paused: %+v, %v", info, err)
				}
				sizes = append(sizes, info.Pause.ImageBytes)
				before := lines()
				start = time.Now()
				info, err = m.Resume(ctx, "t", "box")
				if err != nil {
					t.Fatalf("resume: %v", err)
				}
				resumes = append(resumes, time.Since(start))
				if info.Resume.Memory != memory {
					t.Fatalf("resumed: %+v", info.Resume)
				}
				var b bytes.Buffer
				if err := m.ReadFile(ctx, "t", "box", "/workspace/kept.txt", &b); err != nil || b.String() != "kept\n" {
					t.Errorf("a file after the resume: %q, %v", b.String(), err)
				}
				if !memory {
					if info.Resume.ProcessesLost != 1 {
						t.Errorf("resume of the files only: %+v, want 1 process lost", info.Resume)
					}
					p, err := m.Process(ctx, "t", "box", ticker.PID, true)
					if err != nil || p.Exit == nil || p.Exit.Error != exitPaused {
						t.Errorf("the ticker after a pause of the files only: %+v, %v", p.Exit, err)
					}
					if _, err := m.Contexts(ctx, "t", "box"); err != nil {
						t.Fatal(err)
					}
					break
				}
				if info.Resume.Processes != 1 || info.Resume.Contexts != 1 {
					t.Errorf("resumed: %+v, want the ticker and the context kept", info.Resume)
				}
				if got := mainText(cell("x * 2")); got != "42" {
					t.Errorf("x * 2 after the resume = %q, want 42", got)
				}
				waitLines(before + 2)
				p, err := m.Process(ctx, "t", "box", ticker.PID, false)
				if err != nil || !p.Running {
					t.Errorf("the ticker after the resume: %+v, %v", p, err)
				}
			}
			t.Logf("%s: %d rounds: pause median %v, resume median %v, saved image median %.1f MiB",
				tier, rounds, median(pauses).Round(time.Millisecond), median(resumes).Round(time.Millisecond),
				float64(medianInt(sizes))/(1<<20))
			// A sandbox deleted while paused leaves nothing: no sandbox,
			// no saved state, no disk.
			if err := m.Pause(ctx, "t", "box"); err != nil {
				t.Fatal(err)
			}
			w, ok := table.Lookup("t", "box")
			if !ok {
				t.Fatal("no workspace for the paused sandbox")
			}
			dir := w.Dir()
			if err := m.Delete(ctx, "t", "box"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a sandbox deleted while paused left %s: %v", dir, err)
			}
			if n := e.Fleet().Count()[fleet.HolderSandbox]; n != 0 {
				t.Errorf("%d sandboxes held for sessions after the delete", n)
			}
			if strings.Contains(logs.String(), "restore a paused sandbox") {
				t.Errorf("a restore failed and fell back to the files:\n%s", logs.String())
			}
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianInt(ns []int64) int64 {
	s := slices.Clone(ns)
	slices.Sort(s)
	return s[len(s)/2]
}
