// Package container runs Corral's own image (make image) the way a
// privileged Kubernetes pod runs it: unpacked from its OCI layout into a
// bundle and started by the pinned runc in its own mount, pid, ipc, uts,
// cgroup and network namespaces, with every capability, /dev/loop-control,
// read-write /sys and cgroups, a read-only root and a host directory as
// /var/lib/corral. Inside, `corral serve` runs python on both tiers through
// its port; the verdicts of the limits are checked; after SIGTERM nothing
// of it may remain on the host.
package container

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cgroupParent holds the test's pod cgroup in every hierarchy, apart from
// the suite's sandboxes and from servers on this machine.
const cgroupParent = "corral-image-test"

const apiKey = "container-test-key-0123456789"

// imageLayout is the OCI layout make image wrote, or CORRAL_IMAGE (relative
// to the repository).
func imageLayout(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CORRAL_IMAGE")
	switch {
	case p == "":
		p = filepath.Join(testenv.ModuleRoot(t), "bin", "image", "oci")
	case !filepath.IsAbs(p):
		p = filepath.Join(testenv.ModuleRoot(t), p)
	}
	_, err := os.Stat(filepath.Join(p, "index.json"))
	testenv.Need(t, err == nil, "no image layout at "+p+": run make image (or set CORRAL_IMAGE)")
	return p
}

func TestCorralInAContainer(t *testing.T) {
	if os.Getenv("CORRAL_TEST_IMAGE") != "1" {
		t.Skip("runs on an image built from this checkout: make test-image (CORRAL_TEST_IMAGE=1)")
	}
	testenv.RequireRoot(t)
	runc := testenv.Runtime(t, "runc")
	layout := imageLayout(t)
	start := time.Now()

	work := t.TempDir()
	rootfs := filepath.Join(work, "rootfs")
	data := filepath.Join(work, "data") // the pod's volume at /var/lib/corral
	state := filepath.Join(work, "runc")
	for _, d := range []string{data, state} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := images.Unpack(t.Context(), layout, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	id := "corral-image-test-" + randomHex(4)
	spec := podSpec(cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.Env, data, id)
	t.Logf("capabilities: %s", strings.Join(spec.Process.Capabilities.Bounding, " "))
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	loopsBefore := loopDevices()

	// runc run stays in the foreground, as a shim does: it forwards
	// nothing, the test signals the container with runc kill.
	var logs lockedBuffer
	pidFile := filepath.Join(work, "pid")
	run := exec.Command(runc, "--root", state, "run", "--bundle", work, "--pid-file", pidFile, id)
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			exec.Command(runc, "--root", state, "kill", id, "KILL").Run()
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
			}
			exec.Command(runc, "--root", state, "delete", "--force", id).Run()
		}
		if t.Failed() {
			t.Logf("container output:\n%s", logs.String())
		}
		removeEmptyCgroups(id)
	})

	pid := waitPid(t, pidFile, exited)
	transport := &http.Transport{DialContext: netnsDialer(pid)}
	defer transport.CloseIdleConnections()
	client := sandbox.NewClient(sandbox.Config{
		Endpoint: "http://127.0.0.1:8080", APIKey: apiKey, Timeout: 2 * time.Minute,
		HTTPClient: &http.Client{Transport: transport},
	})
	waitReady(t, transport, exited)
	ready := time.Since(start)
	t.Logf("corral serve ready inside the container after %s", ready.Round(time.Millisecond))
	if out, err := exec.Command(runc, "--root", state, "exec", id, "corral", "doctor").CombinedOutput(); err != nil {
		t.Errorf("corral doctor inside the container: %v\n%s", err, out)
	} else {
		t.Logf("corral doctor inside the container:\n%s", out)
	}

	for _, tier := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					req := sandbox.ExecuteRequest{Language: "python", Code: c.code, Limits: c.limits, Isolation: tier}
					began := time.Now()
					res, err := client.Execute(t.Context(), req)
					var failure *sandbox.Error
					switch {
					case c.verdict == "" && err != nil:
						t.Fatalf("want success, got %v", err)
					case c.verdict != "" && !errors.As(err, &failure):
						t.Fatalf("want %s, got %v", c.verdict, err)
					case c.verdict != "" && failure.Type != c.verdict:
						t.Fatalf("want %s, got %s: %s", c.verdict, failure.Type, failure.Message)
					}
					if failure != nil {
						res = failure.Result
					}
					if res.Tier != string(tier) {
						t.Errorf("ran on tier %q, want %q", res.Tier, tier)
					}
					if c.stdout != "" && res.Stdout != c.stdout {
						t.Errorf("stdout %q, want %q", res.Stdout, c.stdout)
					}
					t.Logf("%s in %s (duration_ms %d, peak %d MB)", res.Status, time.Since(began).Round(time.Millisecond), res.DurationMS, res.PeakMemoryMB)
				})
			}
		})
	}
	// The sandboxes' cgroups nest under the pod's, as the kubelet's
	// accounting and limits need; their disks are loop devices.
	var nested []string
	for _, c := range podCgroups(id) {
		if strings.Contains(c, "/"+cgroupParent+"/"+id+"/corral/") {
			nested = append(nested, c)
		}
	}
	if len(nested) == 0 {
		t.Errorf("no sandbox cgroup under the pod's: %v", podCgroups(id))
	}
	seenLoops := map[string]bool{}
	for dev, backing := range loopDevices() {
		if loopsBefore[dev] != backing && strings.HasPrefix(backing, "/var/lib/corral/") {
			seenLoops[backing] = true
			t.Logf("sandbox disk: %s backed by %s", dev, backing)
		}
	}
	if n := zombies(pid); n > 0 {
		t.Errorf("%d zombie processes in the container's pid namespace", n)
	}

	// What a kubelet does on delete: SIGTERM, then wait for the grace
	// period.
	stopStart := time.Now()
	if out, err := exec.Command(runc, "--root", state, "kill", id, "TERM").CombinedOutput(); err != nil {
		t.Fatalf("runc kill TERM: %v: %s", err, out)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("corral serve exited with %v after SIGTERM", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("corral serve still running 90 s after SIGTERM")
	}
	stopped = true
	t.Logf("stopped %s after SIGTERM; whole test %s", time.Since(stopStart).Round(time.Millisecond), time.Since(start).Round(time.Second))
	if out, err := exec.Command(runc, "--root", state, "delete", id).CombinedOutput(); err != nil && !strings.Contains(string(out), "does not exist") {
		t.Errorf("runc delete: %v: %s", err, out)
	}
	if !strings.Contains(logs.String(), "shutting down") {
		t.Errorf("corral serve did not log its shutdown")
	}

	// Nothing of the pod may remain on the host.
	// A loop device's backing file is named as the container saw it.
	ours := func(backing string) bool {
		rel, ok := strings.CutPrefix(strings.TrimSuffix(backing, " (deleted)"), "/var/lib/corral/")
		if !ok {
			return strings.HasPrefix(backing, work)
		}
		_, err := os.Stat(filepath.Join(data, rel))
		return err == nil || seenLoops[backing] || seenLoops[strings.TrimSuffix(backing, " (deleted)")]
	}
	for _, l := range hostLeftovers(id, work, state, loopsBefore, ours) {
		t.Error(l)
	}
	for _, tier := range []string{"runc", "runsc"} {
		if left, _ := os.ReadDir(filepath.Join(data, "sandboxes", tier)); len(left) > 0 {
			t.Logf("%d %s sandbox directories left in the volume for the next start to reap", len(left), tier)
		}
	}
}

// cases run on both tiers.
var cases = []struct {
	name    string
	code    string
	limits  sandbox.Limits
	verdict sandbox.ErrorType
	stdout  string
}{
	{name: "hello", code: "print(sum(range(10)))", stdout: "45\n"},
	{name: "timeout", code: "while True:\n    pass\n", limits: sandbox.Limits{TimeoutMS: 1000}, verdict: sandbox.ErrTimeout},
	{name: "oom", code: "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n",
		limits: sandbox.Limits{MemoryMB: 128}, verdict: sandbox.ErrOOM},
	{name: "fork-bomb", code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
		limits: sandbox.Limits{TimeoutMS: 5000}, verdict: sandbox.ErrResourceLimit},
}

// podSpec is what a container runtime is given for a privileged pod's
// container (securityContext.privileged: true), trimmed to what Corral
// needs: every capability, no seccomp or AppArmor profile, all devices
// allowed by the devices cgroup with only /dev/loop-control created (Corral
// makes /dev/loopN nodes itself), /sys and the cgroup hierarchies
// read-write in the container's own cgroup namespace (nested sandboxes get
// cgroups under the pod's), a read-only root with tmpfs /tmp and /run, and
// the data volume. Its network namespace is its own, loopback only; the
// test dials into it (netnsDialer).
func podSpec(entrypoint, cmd, env []string, data, id string) *specs.Spec {
	caps := allCapabilities()
	memLimit := int64(6 << 30)
	pids := int64(16384)
	// containerd's default is 1048576; a runtime cannot raise its own
	// hard limit.
	nofile := uint64(1 << 20)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Max < nofile {
		nofile = rl.Max
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: append(append([]string{}, entrypoint...), cmd...),
			Env:  append(append([]string{}, env...), "CORRAL_API_KEY="+apiKey, "CORRAL_LOG_FORMAT=text"),
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
		},
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "corral-0",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "rw"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "rw"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=1g"}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=64m"}},
			{Destination: "/var/lib/corral", Type: "bind", Source: data, Options: []string{"rbind", "rw"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.CgroupNamespace}, {Type: specs.NetworkNamespace},
			},
			CgroupsPath: "/" + cgroupParent + "/" + id,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &memLimit},
				Pids:    &specs.LinuxPids{Limit: &pids},
			},
			Devices: []specs.LinuxDevice{{Path: "/dev/loop-control", Type: "c", Major: 10, Minor: 237, FileMode: fileMode(0o660)}},
		},
	}
}

func fileMode(m os.FileMode) *os.FileMode { return &m }

// allCapabilities names every capability, as a privileged pod gets them.
func allCapabilities() []string {
	names := []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
		"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK",
		"IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT",
		"SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
		"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON",
		"BPF", "CHECKPOINT_RESTORE"}
	// A runtime can grant only what it holds itself: the test's bounding
	// set (this machine's root lacks CAP_SYS_RESOURCE, for one).
	bounding := ^uint64(0)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil {
					bounding = n
				}
			}
		}
	}
	// CORRAL_TEST_CAPS narrows the set, e.g. to the systemd unit's
	// CapabilityBoundingSet, to check that Corral needs no more.
	only := strings.Fields(strings.ReplaceAll(os.Getenv("CORRAL_TEST_CAPS"), ",", " "))
	var out []string
	for i, n := range names {
		if bounding&(1<<i) != 0 && (len(only) == 0 || slices.Contains(only, "CAP_"+n)) {
			out = append(out, "CAP_"+n)
		}
	}
	return out
}

// netnsDialer dials from inside the network namespace of pid: a pod's
// address is only reachable in its own namespace (or through a CNI's
// veth, which this machine does not have). The dialling goroutine's thread
// joins the namespace and is never given back to the scheduler: it ends
// with the goroutine, so no other goroutine runs in the wrong namespace.
func netnsDialer(pid int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			goruntime.LockOSThread()
			fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				err = unix.Setns(fd, unix.CLONE_NEWNET)
				unix.Close(fd)
			}
			if err != nil {
				ch <- result{nil, fmt.Errorf("enter the container's network namespace: %w", err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

func waitPid(t *testing.T, pidFile string, exited <-chan error) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("runc run exited before the container started: %v", err)
		default:
		}
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
	}
	t.Fatal("the container did not start within a minute")
	return 0
}

// waitReady polls /readyz as a readiness probe would.
func waitReady(t *testing.T, transport http.RoundTripper, exited <-chan error) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: transport}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("corral serve exited before it was ready: %v", err)
		default:
		}
		resp, err := hc.Get("http://127.0.0.1:8080/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatal("corral serve not ready within 2 minutes")
}

// zombies counts zombie processes in pid's pid namespace.
func zombies(pid int) int {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return 0
	}
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if l, _ := os.Readlink(filepath.Join(p, "ns", "pid")); l != ns {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(p, "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			n++
		}
	}
	return n
}

// loopDevices lists attached loop devices and their backing files.
func loopDevices() map[string]string {
	out := map[string]string{}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out[strings.Split(f, "/")[3]] = strings.TrimSpace(string(b))
	}
	return out
}

// hostLeftovers lists what the stopped container left on the host: its
// cgroups (and any process in them), mounts of its files, loop devices on
// its disks, runc state.
func hostLeftovers(id, work, state string, loopsBefore map[string]string, ours func(backing string) bool) []string {
	var left []string
	var cgroups []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cgroups = podCgroups(id)
		if len(cgroups) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, c := range cgroups {
		left = append(left, "cgroup "+c)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte("/"+cgroupParent+"/"+id)) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		left = append(left, "process "+filepath.Base(p)+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], work) {
			left = append(left, "mount "+f[4])
		}
	}
	for dev, backing := range loopDevices() {
		if loopsBefore[dev] != backing && ours(backing) {
			left = append(left, "loop device "+dev+" backed by "+backing)
		}
	}
	if entries, _ := os.ReadDir(state); len(entries) > 0 {
		for _, e := range entries {
			left = append(left, "runc state "+filepath.Join(state, e.Name()))
		}
	}
	return left
}

// podCgroups lists the container's cgroup and everything under it, in
// every hierarchy.
func podCgroups(id string) []string {
	var out []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupParent + "/" + id)
	for _, r := range roots {
		filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// removeEmptyCgroups removes the test's parent cgroups when nothing is in
// them any more.
func removeEmptyCgroups(id string) {
	cgs := podCgroups(id)
	for i := len(cgs) - 1; i >= 0; i-- {
		os.Remove(cgs[i])
	}
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupParent)
	for _, p := range parents {
		os.Remove(p)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
