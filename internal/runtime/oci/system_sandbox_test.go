package oci_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
	"github.com/corralhq/corral/internal/testenv"
)

// TestSystemSandbox checks a system sandbox on both tiers: root inside
// writes the image's directories, the writes land on the sandbox's disk
// (owned on runc by an unprivileged host uid) and never in the shared
// image, the sandbox user owns its home, and root inside is still fenced in.
func TestSystemSandbox(t *testing.T) {
	testenv.PythonImage(t)
	img, err := testenv.ImageStore(t).Resolve("python")
	if err != nil {
		t.Fatal(err)
	}
	host, err := images.Host(filepath.Join(testenv.DataDir(t), "host"), 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tier runtime.Tier
		img  images.Image
	}{{runtime.TierContainer, img}, {runtime.TierGVisor, img}, {runtime.TierContainer, host}, {runtime.TierGVisor, host}} {
		tier, img := tc.tier, tc.img
		t.Run(string(tier)+"/"+img.Name, func(t *testing.T) {
			f := newFixture(t, tier, testenv.DataDir(t))
			sb, err := f.rt.Create(t.Context(), runtime.Spec{Rootfs: img.Rootfs, Mounts: img.Mounts, System: true,
				Limits: runtime.Limits{MemoryBytes: 256 << 20, Pids: 128, DiskBytes: 256 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			id := sb.ID()
			defer func() {
				if err := sb.Destroy(t.Context()); err != nil {
					t.Error(err)
				}
				if left := leftovers(f.rt, id); len(left) > 0 {
					t.Errorf("left behind: %v", left)
				}
			}()
			run := func(script string) string {
				t.Helper()
				st, out := runtimetest.ExecReq(t, sb, asRoot(script))
				if st.Code != 0 {
					t.Fatalf("%s: exit %d: %s%s", script, st.Code, out, out.ErrString())
				}
				return strings.TrimSpace(out.String())
			}
			if got := run("id -u; id -g"); got != "0\n0" {
				t.Errorf("id: %q, want root", got)
			}
			// Programs run as the sandbox's user unless they ask.
			if st, out := runtimetest.Exec(t, sb, "sh", "-c", "id -u; touch /usr/local/bin/y"); out.String() != "1000\n" || st.Code == 0 {
				t.Errorf("as the default user: %d %q %q; want uid 1000, refused", st.Code, out.String(), out.ErrString())
			}
			run("echo hi > /usr/local/bin/x && chmod 755 /usr/local/bin/x && mkdir -p /opt/tool && echo c > /etc/corral-test")
			if got := run("grep ^user: /etc/passwd; stat -c '%u %g %a' /home/user"); got != "user:x:1000:1000:user:/home/user:/bin/bash\n1000 1000 755" {
				t.Errorf("user: %q", got)
			}
			if got := run("stat -c '%u' /usr/local/bin /etc/passwd /usr/bin/python3"); got != "0\n0\n0" {
				t.Errorf("owners inside: %q, want root's", got)
			}
			// The system layer is on the sandbox's disk: its limit holds.
			if st, out := runtimetest.ExecReq(t, sb, asRoot("dd if=/dev/zero of=/opt/big bs=1M count=400 2>&1; rm -f /opt/big")); st.Code != 0 ||
				!strings.Contains(out.String(), "No space left on device") {
				t.Errorf("400 MB into a 256 MB disk's system: %d %q", st.Code, out.String())
			}
			if _, err := os.Stat(filepath.Join(img.Rootfs, "usr/local/bin/x")); err == nil || fileExists("/usr/local/bin/x") {
				t.Error("a write went to the shared image")
			}
			upper := filepath.Join(f.rt.SandboxDir(id), "disk", ".system", "upper", "usr/local/bin/x")
			if len(img.Mounts) > 0 { // the host image: /usr is an overlay of its own
				upper = filepath.Join(f.rt.SandboxDir(id), "disk", ".overlay", "0", "upper", "local/bin/x")
			}
			fi, err := os.Stat(upper)
			if err != nil {
				t.Fatalf("the write is not on the sandbox's disk: %v", err)
			}
			wantUID := uint32(0)
			if tier == runtime.TierContainer {
				wantUID = oci.RootHostID
				if got := run("cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'"); got != "0 100000 1000\n1000 1000 1\n1001 101001 64535" {
					t.Errorf("uid_map: %q", got)
				}
			}
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != wantUID {
				t.Errorf("host owner of root's file: %d, want %d", uid, wantUID)
			}
			// Root inside is fenced in: no mounts, no modules, no devices,
			// nothing of the agent's or the host's.
			if got := run("python3 -c '" + fenceScript + "'"); got != "mount EPERM\ninit_module EPERM\nmknod EPERM\nagent EACCES" {
				t.Errorf("root's attempts:\n%s", got)
			}
		})
	}
}

// fenceScript tries, as root inside, what root outside could do.
const fenceScript = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def show(name, rc):
    print(name, "OK" if rc == 0 else errno.errorcode[ctypes.get_errno()])
show("mount", libc.mount(b"x", b"/mnt", b"tmpfs", 0, None))
show("init_module", libc.syscall(175, None, 0, b""))
show("mknod", libc.mknod(b"/tmp/d", 0o60600, os.makedev(7, 0)))
try:
    os.listdir("/proc/1/root/")
    print("agent OK")
except OSError as e:
    print("agent", errno.errorcode[e.errno])
`

// TestSystemRootSurvivesPause: what root wrote in the system is kept by a
// pause (gVisor: with memory; runc: with files only) and seen again in
// the sandbox that takes over its disk.
func TestSystemRootSurvivesPause(t *testing.T) {
	testenv.PythonImage(t)
	img, err := testenv.ImageStore(t).Resolve("python")
	if err != nil {
		t.Fatal(err)
	}
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			dir := testenv.DataDir(t)
			f := newFixture(t, tier, dir)
			spec := runtime.Spec{Rootfs: img.Rootfs, Mounts: img.Mounts, System: true,
				Limits:    runtime.Limits{MemoryBytes: 256 << 20, Pids: 128, DiskBytes: 256 << 20},
				Workspace: filepath.Join(dir, "disk.img")}
			sb, err := f.rt.Create(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Destroy(context.Background()) })
			if st, out := runtimetest.ExecReq(t, sb, asRoot("echo kept > /usr/local/bin/x && echo 'svc:x:1001:1001::/nonexistent:/bin/false' >> /etc/passwd")); st.Code != 0 {
				t.Fatalf("write: %d %s", st.Code, out.ErrString())
			}
			if tier == runtime.TierGVisor {
				image := filepath.Join(dir, "paused")
				if err := sb.(runtime.Pauser).Pause(t.Context(), image); err != nil {
					t.Fatal(err)
				}
				if err := sb.Destroy(t.Context()); err != nil {
					t.Fatal(err)
				}
				if sb, err = f.rt.Restore(t.Context(), spec, image); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := sb.Destroy(t.Context()); err != nil {
					t.Fatal(err)
				}
				if sb, err = f.rt.Create(t.Context(), spec); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { sb.Destroy(context.Background()) })
			st, out := runtimetest.Exec(t, sb, "sh", "-c", "cat /usr/local/bin/x; grep -c -e ^svc: -e ^user: /etc/passwd")
			if got := out.String(); st.Code != 0 || got != "kept\n2\n" {
				t.Errorf("after the pause: %d %q %s", st.Code, got, out.ErrString())
			}
		})
	}
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// asRoot runs script as root inside the sandbox.
func asRoot(script string) agent.StartRequest {
	return agent.StartRequest{Argv: []string{"sh", "-c", script}, User: "root",
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
}
