package hostile

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/testenv"
)

// host is what the suite watches on the host while sandboxes attack it:
// kernel settings a sandbox could change, a canary file, services a
// sandbox could reach (TCP and UDP on loopback and on the host's address,
// unix sockets abstract and on disk), a bystander process of the sandbox
// user's uid, the clock, memory and disk.
type host struct {
	ip string // the host's first non-loopback IPv4 address, or ""

	tcpPort, udpPort int
	abstract, sock   string // unix socket names: @abstract, /run path

	// hits counts connections and datagrams the services received.
	hits atomic.Int64
	mu   sync.Mutex
	// seen says what reached a service, for the failure message.
	seen []string

	canary     string
	canarySum  [32]byte
	bystander  *exec.Cmd
	files      map[string]string // path → content at the start
	binaries   map[string]string // path → size and mtime at the start
	wall       time.Time         // with its monotonic reading
	memAvail   int64
	diskFree   int64
	diskPath   string
	closers    []io.Closer
	procsStart int
}

// watchHost starts the services and takes the baseline. Everything is
// undone when t ends.
func watchHost(t *testing.T, diskPath string) *host {
	t.Helper()
	h := &host{ip: hostIP(), diskPath: diskPath}
	t.Cleanup(h.close)

	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.serve(tcp)
	h.tcpPort = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.servePackets(udp)
	h.udpPort = udp.LocalAddr().(*net.UDPAddr).Port
	// The same ports on the host's other addresses, where free.
	for _, ip := range []string{"::1", h.ip} {
		if ip == "" {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(h.tcpPort))); err == nil {
			h.serve(l)
		}
		if c, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(h.udpPort))); err == nil {
			h.servePackets(c)
		}
	}
	tag := fmt.Sprintf("corral-hostile-%d", os.Getpid())
	h.abstract = "@" + tag
	abs, err := net.Listen("unix", h.abstract)
	if err != nil {
		t.Fatal(err)
	}
	h.serve(abs)
	h.sock = "/run/" + tag + ".sock"
	os.Remove(h.sock)
	us, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(h.sock, 0o777) // reachable by the sandbox's uid, were it visible
	h.serve(us)

	// A canary that no sandbox may change.
	f, err := os.CreateTemp("/var/tmp", "corral-hostile-canary-")
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 4096)
	rand.Read(content)
	f.Write(content)
	f.Chmod(0o666)
	f.Close()
	h.canary, h.canarySum = f.Name(), sha256.Sum256(content)

	// A process of the sandbox user's uid outside every sandbox: kill -9
	// -1 in a sandbox must not reach it.
	h.bystander = exec.Command("sleep", "3600")
	h.bystander.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	if err := h.bystander.Start(); err != nil {
		t.Fatal(err)
	}

	h.files = readHostFiles()
	h.binaries = map[string]string{}
	for _, p := range []string{testenv.Runtime(t, "runc"), testenv.Runtime(t, "runsc"), testenv.Corral(t)} {
		h.binaries[p] = fileStamp(p)
	}
	h.wall = time.Now()
	h.memAvail = memAvailable()
	h.diskFree = diskFree(diskPath)
	// Unread, they would be 0, and no drain could ever be below them.
	if h.memAvail <= 0 || h.diskFree <= 0 {
		t.Fatalf("cannot read the host's MemAvailable (%d) or the free space of %s (%d)", h.memAvail, diskPath, h.diskFree)
	}
	h.procsStart = hostProcesses()
	return h
}

func (h *host) serve(l net.Listener) {
	h.closers = append(h.closers, l)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.hit("connection to " + l.Addr().String() + " from " + c.RemoteAddr().String())
			c.Close()
		}
	}()
}

func (h *host) servePackets(c net.PacketConn) {
	h.closers = append(h.closers, c)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			h.hit(fmt.Sprintf("%d bytes to %s from %s", n, c.LocalAddr(), from))
		}
	}()
}

func (h *host) hit(what string) {
	h.hits.Add(1)
	h.mu.Lock()
	h.seen = append(h.seen, what)
	h.mu.Unlock()
}

func (h *host) close() {
	for _, c := range h.closers {
		c.Close()
	}
	if h.sock != "" {
		os.Remove(h.sock)
	}
	if h.canary != "" {
		os.Remove(h.canary)
	}
	if h.bystander != nil && h.bystander.Process != nil {
		h.bystander.Process.Kill()
		h.bystander.Wait()
	}
}

// check asserts the host is as it was: kernel settings, the canary, the
// binaries, no connection or datagram at the services, the bystander
// alive, the clock unmoved, memory and disk not drained.
func (h *host) check(t *testing.T) {
	t.Helper()
	now := readHostFiles()
	for _, p := range sortedKeys(h.files, now) {
		if h.files[p] != now[p] {
			t.Errorf("HOST CHANGED: %s was %q, is %q", p, clip(h.files[p]), clip(now[p]))
		}
	}
	if b, err := os.ReadFile(h.canary); err != nil || sha256.Sum256(b) != h.canarySum {
		t.Errorf("HOST CHANGED: canary %s modified (%v)", h.canary, err)
	}
	for p, stamp := range h.binaries {
		if now := fileStamp(p); now != stamp {
			t.Errorf("HOST CHANGED: %s was %s, is %s", p, stamp, now)
		}
	}
	if n := h.hits.Load(); n > 0 {
		h.mu.Lock()
		t.Errorf("HOST REACHED: the host's services saw %d attempts: %q", n, h.seen)
		h.mu.Unlock()
	}
	if st := processState(h.bystander.Process.Pid); st == "" || st == "Z" {
		t.Errorf("HOST CHANGED: the uid-1000 bystander process %d is gone (state %q)", h.bystander.Process.Pid, st)
	}
	// The wall clock moves with the monotonic one unless someone set it.
	if drift := time.Now().Round(0).Sub(h.wall.Round(0)) - time.Since(h.wall); drift > 2*time.Second || drift < -2*time.Second {
		t.Errorf("HOST CHANGED: the wall clock moved %v against the monotonic clock", drift)
	}
	// Generous margins: other work on the machine moves these too; a
	// sandbox that escaped its limits would move them by gigabytes.
	if avail := memAvailable(); avail < h.memAvail-3<<30 {
		t.Errorf("HOST DRAINED: MemAvailable %d MiB, %d MiB at the start", avail>>20, h.memAvail>>20)
	}
	if free := diskFree(h.diskPath); free < h.diskFree-4<<30 {
		t.Errorf("HOST DRAINED: %s has %d MiB free, %d MiB at the start", h.diskPath, free>>20, h.diskFree>>20)
	}
}

// checkGone asserts that nothing of a sandbox remains on the host once its
// execution returned: no process (runc's init, runsc's sandbox and gofer,
// anything that escaped), cgroup, mount or loop device that names it, and
// no process carrying token.
func checkGone(t *testing.T, sandboxID, token string) {
	t.Helper()
	// A runtime helper already running when the sandbox went (a stats
	// probe: runsc events) may take a moment to notice; a process still
	// there after the grace period was left behind.
	var left []string
	for deadline := time.Now().Add(processGrace); ; time.Sleep(100 * time.Millisecond) {
		left = left[:0]
		for _, p := range hostProcessList() {
			if sandboxID != "" && strings.Contains(p.cmdline, sandboxID) {
				left = append(left, fmt.Sprintf("process %d %q of sandbox %s", p.pid, p.cmdline, sandboxID))
			}
			if token != "" && (strings.Contains(p.cmdline, token) || strings.Contains(p.comm, commToken(token))) {
				left = append(left, fmt.Sprintf("process %d %q (%s) carrying the program's token", p.pid, p.cmdline, p.comm))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Errorf("LEFT ON HOST: %s", l)
	}
	if sandboxID == "" {
		t.Errorf("the engine never named the sandbox: its cgroup, mounts and loop devices went unchecked")
		return
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + testenv.CgroupParent + "/" + sandboxID)
	more, _ := filepath.Glob("/sys/fs/cgroup/" + testenv.CgroupParent + "/" + sandboxID)
	for _, d := range append(dirs, more...) {
		t.Errorf("LEFT ON HOST: cgroup %s", d)
	}
	for _, m := range testenv.Mounts(sandboxID) {
		t.Errorf("LEFT ON HOST: mount %s", m)
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, _ := os.ReadFile(l); bytes.Contains(b, []byte(sandboxID)) {
			t.Errorf("LEFT ON HOST: loop device %s backs %s", l, strings.TrimSpace(string(b)))
		}
	}
}

// processGrace is how long a sandbox's processes may outlive its
// execution's return.
const processGrace = 3 * time.Second

// commToken is how token appears as a process name (comm, 15 bytes).
func commToken(token string) string { return token[:min(len(token), 15)] }

// readHostFiles reads the host settings a sandbox could try to change.
func readHostFiles() map[string]string {
	paths := []string{
		"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname",
		"/proc/sys/kernel/modprobe", "/proc/sys/kernel/panic", "/proc/sys/kernel/sysrq",
		"/proc/sys/vm/overcommit_memory", "/proc/sys/net/ipv4/ip_forward",
		"/proc/net/route", "/proc/swaps",
	}
	for _, pat := range []string{"/sys/fs/cgroup/*/release_agent", "/sys/fs/cgroup/*/notify_on_release", "/sys/fs/cgroup/release_agent"} {
		m, _ := filepath.Glob(pat)
		paths = append(paths, m...)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		out[p] = string(b)
	}
	// Loaded modules (names only: use counts change) and links.
	if b, err := os.ReadFile("/proc/modules"); err == nil {
		var names []string
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				names = append(names, f[0])
			}
		}
		sort.Strings(names)
		out["/proc/modules (names)"] = strings.Join(names, " ")
	}
	if ifs, err := net.Interfaces(); err == nil {
		var links []string
		for _, i := range ifs {
			links = append(links, fmt.Sprintf("%s/%v/%d", i.Name, i.Flags, i.MTU))
		}
		sort.Strings(links)
		out["links"] = strings.Join(links, " ")
	}
	return out
}

func fileStamp(p string) string {
	st, err := os.Stat(p)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d bytes, mode %v, modified %v", st.Size(), st.Mode(), st.ModTime())
}

func sortedKeys(a, b map[string]string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]string{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

type hostProcess struct {
	pid           int
	cmdline, comm string
}

func hostProcessList() []hostProcess {
	entries, _ := os.ReadDir("/proc")
	var out []hostProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		out = append(out, hostProcess{pid: pid, cmdline: string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})), comm: strings.TrimSpace(string(comm))})
	}
	return out
}

// hostProcesses counts the host's processes.
func hostProcesses() int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if c := e.Name()[0]; c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// hostTasks counts the host's threads.
func hostTasks() int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/task/*")
	return len(dirs)
}

// processState returns a process's state letter, or "" if it is gone.
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

func memAvailable() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func diskFree(path string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * st.Bsize
}

// newToken returns a name a program can give its processes, so the host
// can find any that outlive the sandbox.
func newToken() string {
	var b [5]byte
	rand.Read(b[:])
	return "hz" + hex.EncodeToString(b[:])
}
