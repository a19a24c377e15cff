package oci_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) {
	if tier := os.Getenv("CORRAL_TEST_HANG_TIER"); tier != "" {
		hang(runtime.Tier(tier))
		return
	}
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

type fixture struct {
	rt  *oci.Runtime
	env runtimetest.Env
}

func newFixture(t testing.TB, tier runtime.Tier, dataDir string) fixture {
	testenv.RequireRoot(t)
	bin, flags := testenv.Runtime(t, "runc"), []string(nil)
	if tier == runtime.TierGVisor {
		bin, flags = testenv.Runtime(t, "runsc"), oci.GVisorFlags
	}
	rt, err := oci.New(oci.Config{
		Tier: tier, Binary: bin, Flags: flags, DataDir: dataDir,
		AgentBinary: testenv.Corral(t), CgroupParent: testenv.CgroupParent, UID: 1000, GID: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	img, err := images.Host(filepath.Join(dataDir, "images", "host"), 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{rt: rt, env: runtimetest.Env{
		Rootfs:        img.Rootfs,
		Mounts:        img.Mounts,
		PidsAccounted: tier == runtime.TierContainer,
		NoLeftovers:   func(id string) []string { return leftovers(rt, id) },
	}}
}

// leftovers lists what of sandbox id remains on the host.
func leftovers(rt *oci.Runtime, id string) []string {
	var left []string
	for _, m := range testenv.Mounts(id) {
		left = append(left, "mount: "+m)
	}
	if cgroup.Exists("/" + testenv.CgroupParent + "/" + id) {
		left = append(left, "cgroup /"+testenv.CgroupParent+"/"+id)
	}
	if _, err := os.Stat(rt.SandboxDir(id)); err == nil {
		left = append(left, "directory "+rt.SandboxDir(id))
	}
	if states, _ := filepath.Glob(filepath.Join(rt.StateDir(), "*"+id+"*")); len(states) > 0 {
		left = append(left, fmt.Sprintf("runtime state %v", states))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		// Zombies are the host init's to reap; they hold nothing.
		if st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat")); err == nil && zombie(st) {
			continue
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), id) {
			left = append(left, "process "+filepath.Base(filepath.Dir(p)))
		}
	}
	return left
}

func zombie(stat []byte) bool {
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func TestRunc(t *testing.T) {
	f := newFixture(t, runtime.TierContainer, t.TempDir())
	runtimetest.Run(t, f.rt, f.env)
}

func TestRunsc(t *testing.T) {
	f := newFixture(t, runtime.TierGVisor, t.TempDir())
	runtimetest.Run(t, f.rt, f.env)
}

// TestRefusedUpdateChangesNothing reads the cgroup of a sandbox whose
// Update was refused for holding more memory than the new limit: every
// file is as before, the CPU quota included, which runtimetest cannot see
// from inside.
func TestRefusedUpdateChangesNothing(t *testing.T) {
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tier, t.TempDir())
			sb, err := f.rt.Create(t.Context(), runtime.Spec{Rootfs: f.env.Rootfs, Mounts: f.env.Mounts,
				Limits: runtime.Limits{MemoryBytes: 512 << 20, CPUCores: 1, Pids: 128, DiskBytes: 64 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := sb.Destroy(context.Background()); err != nil {
					t.Errorf("destroy: %v", err)
				}
			})
			path := "/" + testenv.CgroupParent + "/" + sb.ID()
			names := map[string][]string{
				"memory": {"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"},
				"cpu":    {"cpu.cfs_period_us", "cpu.cfs_quota_us"},
				"pids":   {"pids.max"},
			}
			if cgroup.Unified() {
				names = map[string][]string{"": {"memory.max", "memory.swap.max", "cpu.max", "pids.max"}}
			}
			limits := func() map[string]string {
				got := map[string]string{}
				for controller, files := range names {
					for _, name := range files {
						b, err := os.ReadFile(filepath.Join(cgroup.Root, controller, path, name))
						if errors.Is(err, os.ErrNotExist) && strings.Contains(name, "sw") {
							continue // no swap accounting
						}
						if err != nil {
							t.Fatal(err)
						}
						got[name] = strings.TrimSpace(string(b))
					}
				}
				return got
			}
			before := limits()
			runtimetest.HoldMemory(t, sb, 160)
			err = sb.Update(t.Context(), runtime.Limits{MemoryBytes: 96 << 20, CPUCores: 0.5, Pids: 64})
			if !errors.Is(err, runtime.ErrLimitBelowUsage) {
				t.Fatalf("Update to 96 MB under 160 MB held = %v, want ErrLimitBelowUsage", err)
			}
			if diff := cmp.Diff(before, limits()); diff != "" {
				t.Errorf("a refused Update changed the cgroup (-before +after):\n%s", diff)
			}
		})
	}
}

// hang is the child side of TestReapAfterCrash.
func hang(tier runtime.Tier) {
	t := &testing.T{}
	f := newFixture(t, tier, os.Getenv("CORRAL_TEST_HANG_DIR"))
	runtimetest.HangingChild(f.rt, f.env)
}

// TestReapAfterCrash kills -9 a process that owns a running sandbox, then
// checks that Reap in a new process removes every trace of it.
func TestReapAfterCrash(t *testing.T) {
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := newFixture(t, tier, dir)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "CORRAL_TEST_HANG_TIER="+string(tier), "CORRAL_TEST_HANG_DIR="+dir,
				"CORRAL_TEST_BINARY="+testenv.Corral(t))
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "sb-") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child said %q, %v", line, err)
			}
			id := strings.TrimSpace(line)
			if len(leftovers(f.rt, id)) == 0 {
				t.Fatalf("sandbox %s not found while its owner lives", id)
			}
			// Reap must not touch a sandbox whose owner is alive.
			if n, err := f.rt.Reap(t.Context()); err != nil || n != 0 {
				t.Fatalf("Reap with the owner alive = %d, %v; want 0", n, err)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			n, err := f.rt.Reap(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("reaped %d sandboxes, want 1", n)
			}
			deadline := time.Now().Add(5 * time.Second)
			for len(leftovers(f.rt, id)) > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if left := leftovers(f.rt, id); len(left) > 0 {
				t.Errorf("left behind after reap: %v", left)
			}
		})
	}
}

// TestDestroyKillsWhatTheRuntimeDidNotSay: a process in a sandbox's cgroup
// that the runtime never reported (what a creation killed half-way leaves:
// runsc's sandbox and gofer, with the disk mounted in their namespace) is
// killed by Destroy, which then leaves nothing.
func TestDestroyKillsWhatTheRuntimeDidNotSay(t *testing.T) {
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			f := newFixture(t, tier, t.TempDir())
			sb, err := f.rt.Create(t.Context(), runtime.Spec{Rootfs: f.env.Rootfs, Mounts: f.env.Mounts,
				Limits: runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 64, DiskBytes: 64 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			// A stray: started by nobody the sandbox knows, put in its cgroup.
			stray := exec.Command("sleep", "1000")
			if err := stray.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { stray.Wait(); close(exited) }()
			defer stray.Process.Kill()
			path := filepath.Join(cgroup.Root, "pids", testenv.CgroupParent, sb.ID(), "cgroup.procs")
			if cgroup.Unified() {
				path = filepath.Join(cgroup.Root, testenv.CgroupParent, sb.ID(), "cgroup.procs")
			}
			if err := os.WriteFile(path, []byte(strconv.Itoa(stray.Process.Pid)), 0); err != nil {
				t.Fatal(err)
			}
			if err := sb.Destroy(t.Context()); err != nil {
				t.Errorf("destroy: %v", err)
			}
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				t.Error("the stray process outlived its sandbox's destruction")
			}
			if left := leftovers(f.rt, sb.ID()); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// TestCreateWaitsForAStartSlot: with every start slot taken a Create
// waits, and one whose context ends meanwhile fails saying so and leaves
// nothing; given a slot back, a Create starts.
func TestCreateWaitsForAStartSlot(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, runtime.TierContainer, dir)
	spec := runtime.Spec{Rootfs: f.env.Rootfs, Mounts: f.env.Mounts,
		Limits: runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 64, DiskBytes: 64 << 20}}
	giveBack := f.rt.TakeStartSlots()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	sb, err := f.rt.Create(ctx, spec)
	if err == nil {
		sb.Destroy(t.Context())
		giveBack()
		t.Fatal("Create started a sandbox with no start slot free")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "wait to start") {
		t.Errorf("Create without a slot: %v; want its context's deadline, waiting to start", err)
	}
	f.rt.Close() // the cancelled creation is undone in the background
	if left, err := oci.SandboxDirs(dir); err != nil || len(left) != 0 {
		t.Errorf("a creation that never started left %v (%v)", left, err)
	}
	giveBack()
	sb, err = f.rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create with the slots given back: %v", err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Error(err)
	}
}

// TestStateDirKnowsSandbox: Destroy decides whether the runtime still has
// a container to delete from the runtime's state directory (not from what
// its delete prints), so where that state lives is pinned here for both
// runtimes, and a second delete is no error.
func TestStateDirKnowsSandbox(t *testing.T) {
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tier, t.TempDir())
			sb, err := f.rt.Create(t.Context(), runtime.Spec{Rootfs: f.env.Rootfs, Mounts: f.env.Mounts,
				Limits: runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 128, DiskBytes: 32 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			if !f.rt.Knows(sb.ID()) {
				t.Errorf("the runtime's state directory does not hold running sandbox %s", sb.ID())
			}
			if f.rt.Knows("sb-never-created") {
				t.Error("the runtime's state directory holds a sandbox never created")
			}
			if err := sb.Destroy(context.Background()); err != nil {
				t.Fatal(err)
			}
			if f.rt.Knows(sb.ID()) {
				t.Errorf("the runtime still holds destroyed sandbox %s", sb.ID())
			}
			if left := f.env.NoLeftovers(sb.ID()); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}
