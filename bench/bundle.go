package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// handBundle writes an OCI bundle that runs argv the way a careful person
// would by hand: read-only root with the host's /usr bound read-only, a
// tmpfs /tmp, fresh namespaces, no capabilities, resource limits. It returns
// the bundle directory.
func handBundle(dir string, argv []string, cgroup string) (string, error) {
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"usr", "proc", "sys", "dev", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return "", err
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if target, err := os.Readlink("/" + l); err == nil {
			_ = os.Symlink(target, filepath.Join(rootfs, l))
		}
	}
	mem := int64(512 << 20)
	pids := int64(256)
	quota, period := int64(100000), uint64(100000)
	spec := specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: rootfs, Readonly: true},
		Process: &specs.Process{
			User: specs.User{UID: 1000, GID: 1000}, Args: argv, Cwd: "/tmp",
			Env:             []string{"PATH=/usr/bin:/bin"},
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
		},
		Hostname: "bench",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"bind", "ro", "nosuid", "nodev"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "size=65536k"}},
		},
		Linux: &specs.Linux{
			Namespaces:  []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "cgroup"}},
			CgroupsPath: cgroup,
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &mem},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: &pids},
			},
		},
	}
	b, err := json.MarshalIndent(spec, "", " ")
	if err != nil {
		return "", fmt.Errorf("encode bundle: %w", err)
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}
