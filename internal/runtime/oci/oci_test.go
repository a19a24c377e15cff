package oci

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
	"github.com/corralhq/corral/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files")

const cgroupParent = "corral-test"

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
	rt  *Runtime
	env runtimetest.Env
}

func newFixture(t testing.TB, tier runtime.Tier, dataDir string) fixture {
	testenv.RequireRoot(t)
	bin, flags := testenv.Runtime(t, "runc"), []string(nil)
	if tier == runtime.TierGVisor {
		bin, flags = testenv.Runtime(t, "runsc"), []string{"--network=none", "--oci-seccomp", "--overlay2=none"}
	}
	rt, err := New(Config{
		Tier: tier, Binary: bin, Flags: flags, DataDir: dataDir,
		AgentBinary: testenv.Corral(t), CgroupParent: cgroupParent, UID: 1000, GID: 1000,
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
		Image:         img,
		PidsAccounted: tier == runtime.TierContainer,
		NoLeftovers:   func(id string) []string { return leftovers(rt, id) },
	}}
}

// leftovers lists what of sandbox id remains on the host.
func leftovers(rt *Runtime, id string) []string {
	var left []string
	for _, m := range testenv.Mounts(id) {
		left = append(left, "mount: "+m)
	}
	if cgroup.Exists("/" + cgroupParent + "/" + id) {
		left = append(left, "cgroup /"+cgroupParent+"/"+id)
	}
	if _, err := os.Stat(filepath.Join(rt.sandboxes, id)); err == nil {
		left = append(left, "directory "+filepath.Join(rt.sandboxes, id))
	}
	if _, err := os.Stat(filepath.Join(rt.state, id)); err == nil {
		left = append(left, "runtime state "+filepath.Join(rt.state, id))
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
			cmd.Env = append(os.Environ(), "CORRAL_TEST_HANG_TIER="+string(tier), "CORRAL_TEST_HANG_DIR="+dir)
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

// TestConfigGolden pins the OCI config a sandbox gets.
func TestConfigGolden(t *testing.T) {
	cfg, err := config(bundle{
		Rootfs:         "/var/lib/corral/images/host/rootfs",
		Mounts:         []runtime.Mount{{Source: "/usr", Destination: "/usr"}},
		Limits:         runtime.Limits{MemoryBytes: 512 << 20, CPUCores: 1.5, Pids: 256, DiskBytes: 1 << 30},
		DiskDir:        "/var/lib/corral/sandboxes/runc/sb-test/disk",
		AgentBinary:    "/usr/local/bin/corral",
		CgroupsPath:    "/corral/sb-test",
		UID:            1000,
		GID:            1000,
		SwapAccounting: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "config.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(strings.TrimSpace(string(want)), strings.TrimSpace(string(got))); diff != "" {
		t.Errorf("config.json changed (-golden +got); if intended, go test -update:\n%s", diff)
	}
}

// TestConfigPolicy checks the security properties the golden file pins, so
// an -update cannot silently weaken them.
func TestConfigPolicy(t *testing.T) {
	cfg, err := config(bundle{Rootfs: "/r", DiskDir: "/d", AgentBinary: "/a", CgroupsPath: "/c", UID: 1000, GID: 1000,
		Limits: runtime.Limits{MemoryBytes: 1 << 28, CPUCores: 1, Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Root.Readonly {
		t.Error("root is writable")
	}
	if !cfg.Process.NoNewPrivileges {
		t.Error("noNewPrivileges off")
	}
	if cfg.Process.User.UID == 0 {
		t.Error("runs as root")
	}
	c := cfg.Process.Capabilities
	if c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("capabilities: %+v", c)
	}
	ns := map[string]bool{}
	for _, n := range cfg.Linux.Namespaces {
		if n.Path != "" {
			t.Errorf("namespace %s joins %s", n.Type, n.Path)
		}
		ns[string(n.Type)] = true
	}
	for _, want := range []string{"pid", "network", "ipc", "uts", "mount", "cgroup"} {
		if !ns[want] {
			t.Errorf("no %s namespace", want)
		}
	}
	writable := map[string]bool{}
	for _, m := range cfg.Mounts {
		isRO := false
		for _, o := range m.Options {
			if o == "ro" {
				isRO = true
			}
		}
		if !isRO && (m.Type == "bind") {
			writable[m.Destination] = true
		}
	}
	if diff := cmp.Diff(map[string]bool{"/workspace": true, "/tmp": true}, writable); diff != "" {
		t.Errorf("writable binds (-want +got):\n%s", diff)
	}
	denied := map[string]bool{}
	for _, sc := range cfg.Linux.Seccomp.Syscalls {
		for _, n := range sc.Names {
			if sc.Action == "SCMP_ACT_ALLOW" {
				for _, d := range deniedSyscalls {
					if n == d {
						t.Errorf("seccomp allows denied syscall %s", n)
					}
				}
			} else {
				denied[n] = true
			}
		}
	}
	for _, n := range []string{"mount", "unshare", "setns", "bpf", "keyctl", "io_uring_setup", "userfaultfd", "ptrace", "perf_event_open"} {
		if !denied[n] {
			t.Errorf("seccomp does not deny %s", n)
		}
	}
	if cfg.Linux.Seccomp.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Errorf("seccomp default action %s", cfg.Linux.Seccomp.DefaultAction)
	}
}
