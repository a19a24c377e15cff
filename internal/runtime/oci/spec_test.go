package oci

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/runtime"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestConfigGolden pins the OCI config a sandbox gets.
func TestConfigGolden(t *testing.T) {
	for _, gvisor := range []bool{false, true} {
		name := "config.runc.golden.json"
		if gvisor {
			name = "config.runsc.golden.json"
		}
		t.Run(name, func(t *testing.T) { checkGolden(t, name, gvisor) })
	}
}

func checkGolden(t *testing.T, name string, gvisor bool) {
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
		GVisor:         gvisor,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", name)
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
	if cfg.Root == nil || cfg.Process == nil || cfg.Linux == nil || cfg.Linux.Seccomp == nil {
		t.Fatalf("config without a root, process, linux or seccomp section: %+v", cfg)
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
