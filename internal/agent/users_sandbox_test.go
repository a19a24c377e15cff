//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/testenv"
)

// A system sandbox's agent runs as root and runs processes and file
// operations as the sandbox's users. Here it is the test binary in local
// mode as root ("local-system"): processes run as the users of ROOT/etc/passwd
// on the host's file system, and file operations switch the thread's
// credentials as they do in a sandbox.

const (
	sysPasswd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
	// user is in root's group, which every user namespace a sandbox runs
	// in maps (a group it does not map is not given).
	sysGroup = "root:x:0:user\nuser:x:1000:\n"
)

// startSystem starts a system agent on a fresh root that uid 1000 can
// enter: /workspace is user's, /tmp is for everyone, /srv is root's
// (0755) with a secret in it (0600).
func startSystem(t *testing.T) (*agent.Local, string) {
	t.Helper()
	testenv.RequireRoot(t)
	root, err := os.MkdirTemp("", "corral-users-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o755))
	for _, d := range []string{"workspace", "tmp", "dev/shm", "etc", "srv", "proc", ".corral"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(os.Chown(filepath.Join(root, "workspace"), 1000, 1000))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o1777))
	must(os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte(sysPasswd), 0o644))
	must(os.WriteFile(filepath.Join(root, "etc", "group"), []byte(sysGroup), 0o644))
	must(os.WriteFile(filepath.Join(root, "srv", "secret"), []byte("root's"), 0o600))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := agent.StartLocalSystem(ctx, os.Args[0], root, agent.DiagLog(t))
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

type collect struct {
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
}

func (c *collect) Stdout(p []byte) { c.mu.Lock(); c.stdout.Write(p); c.mu.Unlock() }
func (c *collect) Stderr(p []byte) { c.mu.Lock(); c.stderr.Write(p); c.mu.Unlock() }
func (c *collect) Status([]byte)   {}

// runAs runs req to its end and returns its stdout, failing on a non-zero
// exit.
func runAs(t *testing.T, l *agent.Local, req agent.StartRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out collect
	p, err := l.Start(ctx, req, &out)
	if err != nil {
		t.Fatalf("start %v as %q: %v", req.Argv, req.User, err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.Code != 0 {
		t.Fatalf("%v as %q: %+v, %v; stderr %q", req.Argv, req.User, st, err, out.stderr.String())
	}
	return out.stdout.String()
}

func shAs(user, script string) agent.StartRequest {
	return agent.StartRequest{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", User: user}
}

// TestSystemProcesses: "" runs as uid 1000 with its groups, root as 0,
// each with HOME, USER and LOGNAME from /etc/passwd (unless given); an
// unknown user is refused; a terminal is its user's.
func TestSystemProcesses(t *testing.T) {
	l, root := startSystem(t)
	if h, err := l.Ready(t.Context()); err != nil || !h.Users || h.UID != 0 {
		t.Errorf("hello %+v, %v; want uid 0 with users", h, err)
	}
	const script = `echo "$(id -u) $(id -g) $(id -G) $HOME $USER $LOGNAME"`
	// Local mode takes the user's home under its root, as it does every
	// value naming a place of the sandbox's own (/home/user is one).
	for user, want := range map[string]string{
		"":     "1000 1000 1000 0 " + root + "/home/user user user\n",
		"user": "1000 1000 1000 0 " + root + "/home/user user user\n",
		"root": "0 0 0 /root root root\n",
	} {
		if got := runAs(t, l, shAs(user, script)); got != want {
			t.Errorf("as %q: %q, want %q", user, got, want)
		}
	}
	req := shAs("", `echo "$HOME"`)
	req.Env = append(req.Env, "HOME=/workspace")
	// (Local mode takes the sandbox's /workspace under the root.)
	if got, want := runAs(t, l, req), root+"/workspace\n"; got != want {
		t.Errorf("HOME given: %q, want it kept (%q)", got, want)
	}
	if _, err := l.Start(t.Context(), shAs("ghost", "true"), nil); !errors.Is(err, agent.KindInvalid) {
		t.Errorf("an unknown user: %v, want %s", err, agent.KindInvalid)
	}
	// A process of user cannot write what is root's.
	var out collect
	p, err := l.Start(t.Context(), shAs("", "echo x > /etc/passwd"), &out)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(t.Context()); err != nil || st.Code == 0 {
		t.Errorf("user wrote /etc/passwd: %+v, %v", st, err)
	}
	pty := shAs("", `stat -c %u "$(tty)"; id -u`)
	pty.PTY = &agent.PTYSize{}
	if got := strings.ReplaceAll(runAs(t, l, pty), "\r", ""); got != "1000\n1000\n" {
		t.Errorf("on a terminal: %q, want its user's terminal and uid", got)
	}
}

// TestSystemFiles: file operations are done as their user: what the
// default user writes is 1000's, it cannot write or read what root keeps
// to itself (EACCES), root can; files go anywhere but /proc, /sys, /dev
// and /.corral.
func TestSystemFiles(t *testing.T) {
	l, root := startSystem(t)
	ctx := t.Context()
	owner := func(p string) int {
		t.Helper()
		st, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return int(st.Sys().(*syscall.Stat_t).Uid)
	}
	write := func(p string, opts ...agent.FileOption) error {
		return l.WriteFile(ctx, p, 0o644, strings.NewReader("x"), opts...)
	}
	if err := write("/workspace/a/b"); err != nil {
		t.Fatal(err)
	}
	if u := owner("workspace/a/b"); u != 1000 {
		t.Errorf("written as the default user: owned by %d", u)
	}
	if u := owner("workspace/a"); u != 1000 {
		t.Errorf("a directory made on the way: owned by %d", u)
	}
	if err := write("/srv/x"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("write into root's 0755 directory as the default user: %v, want EACCES", err)
	}
	if err := write("/srv/x", agent.AsUser("root")); err != nil {
		t.Errorf("write into root's directory as root: %v", err)
	} else if u := owner("srv/x"); u != 0 {
		t.Errorf("written as root: owned by %d", u)
	}
	if err := write("/etc/motd", agent.AsUser("user")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("write /etc/motd as user: %v, want EACCES", err)
	}
	if err := write("/x", agent.AsUser("ghost")); !errors.Is(err, agent.KindInvalid) {
		t.Errorf("write as an unknown user: %v, want %s", err, agent.KindInvalid)
	}
	var buf bytes.Buffer
	if err := l.ReadFile(ctx, "/srv/secret", &buf); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read root's 0600 file as the default user: %v, want EACCES", err)
	}
	if err := l.ReadFile(ctx, "/srv/secret", &buf, agent.AsUser("root")); err != nil || buf.String() != "root's" {
		t.Errorf("read root's file as root: %q, %v", buf.String(), err)
	}
	if err := l.Mkdir(ctx, "/srv/d", false); !errors.Is(err, syscall.EACCES) {
		t.Errorf("mkdir in root's directory as the default user: %v, want EACCES", err)
	}
	if err := l.Move(ctx, "/srv/x", "/workspace/x"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("move root's file as the default user: %v, want EACCES", err)
	}
	if err := l.Remove(ctx, "/srv/x"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("remove root's file as the default user: %v, want EACCES", err)
	}
	if err := l.Remove(ctx, "/srv/x", agent.AsUser("root")); err != nil {
		t.Errorf("remove root's file as root: %v", err)
	}
	for _, p := range []string{"/proc/x", "/sys/x", "/dev/x", "/.corral/x", "/proc"} {
		if err := write(p, agent.AsUser("root")); !errors.Is(err, agent.KindInvalid) {
			t.Errorf("write %s: %v, want %s", p, err, agent.KindInvalid)
		}
	}
	if _, err := l.List(ctx, "/proc"); !errors.Is(err, agent.KindInvalid) {
		t.Errorf("list /proc: %v, want %s", err, agent.KindInvalid)
	}
	es, err := l.List(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Path)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "/srv") || !strings.Contains(got, "/workspace") {
		t.Errorf("list /: %s", got)
	}
	// A deeper listing of / does not go into the system's places.
	if err := os.MkdirAll(filepath.Join(root, "proc", "1", "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	es, err = l.ListDepth(ctx, "/", 3, agent.AsUser("root"))
	if err != nil {
		t.Fatal(err)
	}
	var sawProc, sawSrv bool
	for _, e := range es {
		sawProc = sawProc || e.Path == "/proc"
		sawSrv = sawSrv || e.Path == "/srv/secret"
		if strings.HasPrefix(e.Path, "/proc/") {
			t.Errorf("list / to depth 3 went into /proc: %s", e.Path)
		}
	}
	if !sawProc || !sawSrv {
		t.Errorf("list / to depth 3: /proc %v, /srv/secret %v; want both", sawProc, sawSrv)
	}
	if e, err := l.Stat(ctx, "/"); err != nil || !e.Dir || e.Path != "/" {
		t.Errorf("stat /: %+v, %v", e, err)
	}
	if e, err := l.Stat(ctx, "/srv/secret"); err != nil || e.Size != 6 {
		t.Errorf("stat /srv/secret: %+v, %v", e, err)
	}
	// Watches follow their user too: root's 0700 directory is not the
	// default user's to watch.
	if err := os.Mkdir(filepath.Join(root, "srv", "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Watch(ctx, "/srv/private", false, func(agent.WatchEvent) {}); !errors.Is(err, syscall.EACCES) {
		t.Errorf("watch root's 0700 directory as the default user: %v, want EACCES", err)
	}
	stop, err := l.Watch(ctx, "/srv/private", false, func(agent.WatchEvent) {}, agent.AsUser("root"))
	if err != nil {
		t.Errorf("watch root's directory as root: %v", err)
	} else {
		stop()
	}
	// A recursive watch of / names what changes by its path.
	events := make(chan agent.WatchEvent, 64)
	stop, err = l.Watch(ctx, "/", true, func(e agent.WatchEvent) { events <- e }, agent.AsUser("root"))
	if err != nil {
		t.Fatalf("watch /: %v", err)
	}
	if err := write("/srv/private/w", agent.AsUser("root")); err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; {
		select {
		case e := <-events:
			seen = e.Path == "/srv/private/w"
			if strings.HasPrefix(e.Path, "//") || strings.HasPrefix(e.Path, "/proc/") {
				t.Errorf("watch /: event %+v", e)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("watch /: no event for /srv/private/w")
		}
	}
	stop()
	// The agent's own threads are root's still: a process as root after
	// all this can write anywhere.
	after := shAs("root", `echo ok > "$1"`)
	after.Argv = append(after.Argv, "sh", "/tmp/after")
	runAs(t, l, after)
	if u := owner("tmp/after"); u != 0 {
		t.Errorf("after file operations, root's process wrote a file of %d", u)
	}
}

// TestSystemZygote: a zygote started for the default user forks children
// that run as it; naming another user for a child is refused; a reset
// still clears what the user made and pings the zygote.
func TestSystemZygote(t *testing.T) {
	// The system's python: uid 1000 must be able to run it (a python
	// under /root is not).
	_, err := os.Stat("/usr/bin/python3")
	testenv.Need(t, err == nil, "/usr/bin/python3")
	l, root := startSystem(t)
	ctx := t.Context()
	r, ok := lang.Get("python")
	if !ok {
		t.Fatal("no python runner")
	}
	step := r.(lang.Zygoter).ZygoteStep(nil)
	env := append([]string{"PATH=/usr/bin:/bin"}, step.Env...)
	z, err := l.Start(ctx, agent.StartRequest{Argv: step.Argv, Env: env, Dir: "/", Zygote: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := r.Plan("import os; print(os.getuid(), os.environ.get('USER')); open('made', 'w').close()")
	file := filepath.Join(root, plan.Files[0].Path)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, plan.Files[0].Content, 0o644); err != nil {
		t.Fatal(err)
	}
	via := agent.StartRequest{Argv: plan.Run.Argv, Env: env, Dir: "/workspace", StatusFD: true, Via: z.ID()}
	if got := runAs(t, l, via); got != "1000 user\n" {
		t.Errorf("a zygote's child: %q, want uid 1000 and USER", got)
	}
	via.User = "root"
	if _, err := l.Start(ctx, via, nil); !errors.Is(err, agent.KindInvalid) {
		t.Errorf("a zygote's child as root: %v, want %s", err, agent.KindInvalid)
	}
	if st, err := os.Stat(filepath.Join(root, "workspace", "made")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("the child's file: %v", err)
	}
	if err := l.WriteFile(ctx, "/workspace/d/f", 0o644, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, agent.ResetRequest{Clear: []string{"/workspace"}, Zygotes: []uint32{z.ID()}}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if es, err := os.ReadDir(filepath.Join(root, "workspace")); err != nil || len(es) != 0 {
		t.Errorf("after the reset /workspace holds %v (%v)", es, err)
	}
}
