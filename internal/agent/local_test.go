//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests in this file drive a real agent over the real Client, in local
// mode: no root, no runtime, no sandbox. The agent is this test binary,
// started again with the agent's own arguments.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && (os.Args[1] == "local" || os.Args[1] == "local-system") {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// startLocal starts an agent in local mode on a fresh root with /workspace
// and /tmp, and ends it when the test does.
func startLocal(t *testing.T) (*Local, string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"workspace", "tmp", "dev/shm"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := StartLocal(ctx, os.Args[0], root, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("agent exit: %v", err)
		}
	})
	return l, root
}

// testWriter logs the agent's diagnostics with the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("agent: %s", bytes.TrimSpace(p))
	return len(p), nil
}

// output collects a process's output.
type output struct {
	mu                     sync.Mutex
	stdout, stderr, status bytes.Buffer
}

func (o *output) Stdout(p []byte) { o.mu.Lock(); o.stdout.Write(p); o.mu.Unlock() }
func (o *output) Stderr(p []byte) { o.mu.Lock(); o.stderr.Write(p); o.mu.Unlock() }
func (o *output) Status(p []byte) { o.mu.Lock(); o.status.Write(p); o.mu.Unlock() }

// run starts req, waits for its end and returns its output and status.
func run(t *testing.T, c *Local, req StartRequest) (*output, ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out output
	p, err := c.Start(ctx, req, &out)
	if err != nil {
		t.Fatalf("start %v: %v", req.Argv, err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %v: %v", req.Argv, err)
	}
	return &out, st
}

func sh(script string) StartRequest {
	return StartRequest{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace"}
}

// TestLocalPaths: sandbox paths in argv and env are the root's, other
// values (paths already under the root, the host's own) are left as given.
func TestLocalPaths(t *testing.T) {
	l, root := startLocal(t)
	if err := os.WriteFile(filepath.Join(root, "tmp", "x"), []byte("in the sandbox's /tmp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := StartRequest{
		Argv: []string{"/bin/sh", "-c", `cat "$1"; echo "$HOME"; echo "$2"; echo "$3"; echo "$4"; echo "$OTHER"`, "sh",
			"/tmp/x", "/tmpfile", root + "/workspace", "/dev/shm/"},
		Env: []string{"PATH=/usr/bin:/bin", "HOME=/workspace", "OTHER=/etc/hostname"},
		Dir: "/workspace",
	}
	out, st := run(t, l, req)
	want := "in the sandbox's /tmp\n" + root + "/workspace\n/tmpfile\n" + root + "/workspace\n" + root + "/dev/shm/\n/etc/hostname\n"
	if got := out.stdout.String(); got != want || st.Code != 0 {
		t.Errorf("stdout %q (status %+v, stderr %q), want %q", got, st, out.stderr.String(), want)
	}
}

func TestLocalProcess(t *testing.T) {
	l, root := startLocal(t)
	out, st := run(t, l, sh("echo out; echo err >&2; pwd; exit 3"))
	if got, want := out.stdout.String(), "out\n"+filepath.Join(root, "workspace")+"\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if out.stderr.String() != "err\n" || st.Code != 3 || st.Signal != 0 {
		t.Errorf("stderr %q, status %+v", out.stderr.String(), st)
	}

	_, st = run(t, l, sh("kill -TERM $$"))
	if st.Code != -1 || st.Signal != int(syscall.SIGTERM) {
		t.Errorf("killed by SIGTERM: %+v", st)
	}

	req := sh("echo compile_error >&3")
	req.StatusFD = true
	if out, _ := run(t, l, req); out.status.String() != "compile_error\n" {
		t.Errorf("status fd: %q", out.status.String())
	}

	// Stdin, and output larger than a frame or a pipe.
	ctx := t.Context()
	var cat output
	p, err := l.Start(ctx, StartRequest{Argv: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: true}, &cat)
	if err != nil {
		t.Fatal(err)
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	if err := p.WriteStdin(in); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("cat: %+v %v", st, err)
	}
	if !bytes.Equal(cat.stdout.Bytes(), in) {
		t.Errorf("cat returned %d bytes of %d", cat.stdout.Len(), len(in))
	}

	// A signal to a running process's group.
	p, err = l.Start(ctx, sh("sleep 30"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Signal != int(syscall.SIGKILL) && st.Code != 128+int(syscall.SIGKILL) {
		t.Errorf("after SIGKILL: %+v %v", st, err)
	}
}

func TestLocalStartErrors(t *testing.T) {
	l, _ := startLocal(t)
	for _, c := range []struct {
		req  StartRequest
		kind error
	}{
		{StartRequest{Argv: []string{"no-such-program-anywhere"}, Env: []string{"PATH=/usr/bin:/bin"}}, syscall.ENOENT},
		{StartRequest{Argv: []string{"/no/such/program"}}, syscall.ENOENT},
		{StartRequest{Argv: []string{"/bin/true"}, Dir: "/workspace/missing"}, syscall.ENOENT},
		{StartRequest{}, KindInvalid},
		{StartRequest{Argv: []string{"x"}, Via: 99}, KindZygote},
		{StartRequest{Argv: []string{"x"}, Via: 99, Zygote: true}, KindZygote}, // no zygote 99 (a zygote through a zygote is allowed: zygote_via.go),
		// Too large for a message: refused before it is sent, not taken
		// for a broken stream.
		{StartRequest{Argv: []string{"/bin/true"}, Dir: "/" + strings.Repeat("a", MaxPayload)}, ErrTooLarge},
	} {
		_, err := l.Start(t.Context(), c.req, nil)
		if !errors.Is(err, c.kind) {
			t.Errorf("start %+v: %v, want %v", c.req, err, c.kind)
		}
	}
	// The agent still serves.
	if _, st := run(t, l, sh("exit 0")); st.Code != 0 {
		t.Errorf("after errors: %+v", st)
	}
}

// TestLocalLeftovers: what a program leaves running is killed when it
// ends, and persistent processes are spared; processes that are not the
// agent's descendants are never touched in local mode.
func TestLocalLeftovers(t *testing.T) {
	outsider := startSleep(t)
	l, _ := startLocal(t)

	keep, err := l.Start(t.Context(), StartRequest{Argv: []string{"/bin/sleep", "30"}, Dir: "/workspace", Persistent: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, st := run(t, l, sh("sleep 30 & sleep 30 & echo $!"))
	if st.Code != 0 || st.Reaped < 2 {
		t.Errorf("status %+v, want exit 0 and 2 reaped", st)
	}
	left, _ := strconv.Atoi(strings.TrimSpace(out.stdout.String()))
	waitGone(t, left)
	if !alive(keep.PID) {
		t.Error("the persistent process was killed")
	}
	if !alive(outsider) {
		t.Error("a process outside the agent was killed")
	}

	// KillAll spares the persistent process too; Close does not.
	if err := l.KillAll(t.Context(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !alive(keep.PID) || !alive(outsider) {
		t.Error("KillAll killed the persistent process or an outsider")
	}
	if err := l.Close(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
	waitGone(t, keep.PID)
	if !alive(outsider) {
		t.Error("Close killed a process outside the agent")
	}
}

// startSleep starts a process that is not the agent's.
func startSleep(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); p.Wait() })
	return p.Pid
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still alive", pid)
		}
	}
}

func TestLocalFiles(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")

	if err := l.WriteFile(ctx, "/workspace/a/b.txt", 0o600, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "a", "b.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("on disk: %q %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(ws, "a", "b.txt")); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st)
	}
	// Larger than a frame.
	big := bytes.Repeat([]byte("x"), 3*MaxPayload+5)
	if err := l.WriteFile(ctx, "/tmp/big", 0, bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := l.ReadFile(ctx, "/tmp/big", &got); err != nil || !bytes.Equal(got.Bytes(), big) {
		t.Fatalf("read back %d bytes of %d: %v", got.Len(), len(big), err)
	}
	entries, err := l.List(ctx, "/workspace")
	if err != nil || len(entries) != 1 || entries[0].Name != "a" || entries[0].Type != "dir" {
		t.Fatalf("list /workspace: %+v %v", entries, err)
	}
	entries, err = l.List(ctx, "/workspace/a")
	if err != nil || len(entries) != 1 || entries[0].Name != "b.txt" || entries[0].Path != "/workspace/a/b.txt" || entries[0].Size != 5 || entries[0].Type != "file" {
		t.Fatalf("list /workspace/a: %+v %v", entries, err)
	}

	// What a program may have left in the way.
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := "/workspace/" + strings.Repeat("n", 300)
	for _, c := range []struct {
		name string
		do   func() error
		kind error
	}{
		{"read a missing file", func() error { return l.ReadFile(ctx, "/workspace/missing", io.Discard) }, syscall.ENOENT},
		{"read a directory", func() error { return l.ReadFile(ctx, "/workspace/a", io.Discard) }, KindNotRegular},
		{"read a fifo", func() error { return l.ReadFile(ctx, "/workspace/fifo", io.Discard) }, KindNotRegular},
		{"read outside", func() error { return l.ReadFile(ctx, "/etc/passwd", io.Discard) }, KindInvalid},
		{"read unclean", func() error { return l.ReadFile(ctx, "/workspace/../etc/passwd", io.Discard) }, KindInvalid},
		{"list a file", func() error { _, err := l.List(ctx, "/workspace/a/b.txt"); return err }, syscall.ENOTDIR},
		{"list a fifo", func() error { _, err := l.List(ctx, "/workspace/fifo"); return err }, syscall.ENOTDIR},
		{"list a missing directory", func() error { _, err := l.List(ctx, "/workspace/none"); return err }, syscall.ENOENT},
		{"list the root", func() error { _, err := l.List(ctx, "/"); return err }, KindInvalid},
		{"write through a link", func() error { return l.WriteFile(ctx, "/workspace/link", 0, strings.NewReader("x")) }, KindSymlink},
		{"write under a file", func() error { return l.WriteFile(ctx, "/workspace/a/b.txt/c", 0, strings.NewReader("x")) }, syscall.ENOTDIR},
		{"write over a directory", func() error { return l.WriteFile(ctx, "/workspace/a", 0, strings.NewReader("x")) }, syscall.EISDIR},
		{"write a long name", func() error { return l.WriteFile(ctx, long, 0, strings.NewReader("x")) }, syscall.ENAMETOOLONG},
		{"write outside", func() error { return l.WriteFile(ctx, "/etc/x", 0, strings.NewReader("x")) }, KindInvalid},
		{"remove the workspace", func() error { return l.Remove(ctx, "/workspace") }, KindInvalid},
	} {
		if err := c.do(); !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", c.name, err, c.kind)
		}
	}
	if b, _ := os.ReadFile("/etc/passwd"); len(b) == 0 {
		t.Error("the link's target was emptied")
	}
	entries, err = l.List(ctx, "/workspace")
	if i := slices.IndexFunc(entries, func(e Entry) bool { return e.Name == "link" }); err != nil || i < 0 || entries[i].Type != "symlink" || entries[i].SymlinkTarget != "/etc/passwd" {
		t.Errorf("a link listed: %+v %v", entries, err)
	}

	if err := l.Remove(ctx, "/workspace/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after remove: %v", err)
	}
	if err := l.Remove(ctx, "/workspace/a"); err != nil {
		t.Errorf("removing what is not there: %v", err)
	}
}

// TestLocalFilesInOrder: a file sent before a start is in place when the
// process runs (SendFile's promise).
func TestLocalFilesInOrder(t *testing.T) {
	l, _ := startLocal(t)
	placed, err := l.SendFile(t.Context(), "/workspace/main.sh", 0o755, strings.NewReader("echo placed"))
	if err != nil {
		t.Fatal(err)
	}
	out, st := run(t, l, sh(". ./main.sh"))
	if err := placed(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out.stdout.String() != "placed\n" || st.Code != 0 {
		t.Errorf("%q %+v", out.stdout.String(), st)
	}
}

func TestLocalForward(t *testing.T) {
	l, root := startLocal(t)
	// The host's end: a unix socket that answers each connection with
	// what it read, upper-cased.
	sock := filepath.Join(root, "proxy.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				c.Write(bytes.ToUpper(b))
			}()
		}
	}()

	// A port someone holds: EADDRINUSE, by kind.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := held.Addr().String()
	if err := l.Forward(t.Context(), addr, "/proxy.sock"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("forward on a held port: %v, want EADDRINUSE", err)
	}
	held.Close()
	if err := l.Forward(t.Context(), addr, "/proxy.sock"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("through the relay"))
	c.(*net.TCPConn).CloseWrite()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "THROUGH THE RELAY" {
		t.Errorf("relayed %q %v", b, err)
	}
}

func TestLocalReset(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	for _, p := range []string{"workspace/x/y", "tmp/z", "dev/shm/sem.x"} {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte("left"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A directory a program made unwritable to itself.
	locked := filepath.Join(root, "workspace", "locked")
	os.MkdirAll(filepath.Join(locked, "in"), 0o755)
	os.Chmod(locked, 0o500)
	keep, err := l.Start(ctx, StartRequest{Argv: []string{"/bin/sleep", "30"}, Dir: "/workspace", Persistent: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	left, err := l.Start(ctx, sh("sleep 30"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, ResetRequest{Clear: []string{"/workspace", "/tmp"}, IPC: true}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"workspace", "tmp", "dev/shm"} {
		if names, err := os.ReadDir(filepath.Join(root, d)); err != nil || len(names) != 0 {
			t.Errorf("%s after reset: %v %v", d, names, err)
		}
	}
	if st, err := left.Wait(ctx); err != nil || st.Signal != int(syscall.SIGKILL) {
		t.Errorf("a program's process after reset: %+v %v", st, err)
	}
	if !alive(keep.PID) {
		t.Error("reset killed the persistent process")
	}
	for _, c := range []struct {
		req  ResetRequest
		kind error
	}{
		{ResetRequest{Clear: []string{"/etc"}}, KindInvalid},
		{ResetRequest{Zygotes: []uint32{99}}, KindZygote},
	} {
		if err := l.Reset(ctx, c.req); !errors.Is(err, c.kind) {
			t.Errorf("reset %+v: %v, want %v", c.req, err, c.kind)
		}
	}
}

// TestOnlyPID1: without local mode the agent refuses to run unless it is
// PID 1, and its command line knows no other mode.
func TestOnlyPID1(t *testing.T) {
	if err := Serve(strings.NewReader(""), io.Discard, slog.New(slog.DiscardHandler)); !errors.Is(err, ErrNotInit) {
		t.Errorf("Serve as pid %d: %v, want ErrNotInit", os.Getpid(), err)
	}
	for _, args := range [][]string{{"local"}, {"sandbox", "/"}, {"local", "/", "x"}} {
		if code := Main(args); code != 2 {
			t.Errorf("Main(%q) = %d, want 2", args, code)
		}
	}
	if err := ServeLocal(strings.NewReader(""), io.Discard, slog.New(slog.DiscardHandler), "relative", false); err == nil {
		t.Error("ServeLocal on a relative root")
	}
	if !slices.Contains(ignoredSignals, os.Signal(syscall.SIGTERM)) {
		t.Error("a sandbox's agent does not shield SIGTERM")
	}
}

// brokenReader gives n bytes, then fails.
type brokenReader struct{ n int }

func (r *brokenReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("the client went away")
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// TestLocalUploadAllOrNothing: an upload the host abandons part way
// leaves neither a file cut short nor anything hidden, and the file it
// would have replaced keeps its contents; a whole one replaces it.
func TestLocalUploadAllOrNothing(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")
	if err := l.WriteFile(ctx, "/workspace/kept.txt", 0, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/workspace/new.bin", "/workspace/kept.txt"} {
		if err := l.WriteFile(ctx, p, 0, &brokenReader{n: 3*MaxPayload + 7}); err == nil {
			t.Fatalf("%s: an upload whose reader failed succeeded", p)
		}
	}
	// Frames are handled in order: the listing comes after the discard.
	entries, err := l.List(ctx, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name != "kept.txt" || entries[0].Size != 3 {
		t.Errorf("after two abandoned uploads /workspace holds %+v, want kept.txt (3 bytes) alone", entries)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "kept.txt")); err != nil || string(b) != "old" {
		t.Errorf("kept.txt: %q %v", b, err)
	}
	if err := l.WriteFile(ctx, "/workspace/kept.txt", 0, strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "kept.txt")); err != nil || string(b) != "new" {
		t.Errorf("kept.txt after a whole upload: %q %v", b, err)
	}
}

// TestLocalDaemonHoldsOutput: a persistent process that leaves a daemon
// holding its stdout still ends (its output before the end arrives), a
// silent daemon's at once, a chatty one's after 10 graces at most; what
// the daemon writes later is dropped, and it is never blocked.
func TestLocalDaemonHoldsOutput(t *testing.T) {
	l, root := startLocal(t)
	for _, daemon := range []string{"sleep 30", "while sleep 0.05; do echo from the daemon; done"} {
		req := sh("setsid sh -c '" + daemon + "' & echo $! > /workspace/daemon.pid; echo started")
		req.Persistent = true
		out, st := run(t, l, req) // fails if the end never comes
		if b, err := os.ReadFile(filepath.Join(root, "workspace", "daemon.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			}
		}
		if st.Code != 0 || !strings.HasPrefix(out.stdout.String(), "started\n") {
			t.Errorf("%s: exit %+v, stdout %q; want 0 and started first", daemon, st, out.stdout.String())
		}
	}
}
