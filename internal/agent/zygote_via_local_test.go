//go:build linux

package agent

import (
	"encoding/json"
	"syscall"
	"testing"
)

// viaZygote is a minimal zygote whose children are zygotes too: each
// child says hello with its level on stdout and its status fd, then serves
// fork requests on its own control socket like its parent.
const viaZygote = `
import json, os, socket, sys
def serve(ctl, level):
    ctl.send(json.dumps({'ready': {'level': level, 'pid': os.getpid()}}).encode())
    while True:
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 8)
        if not msg:
            os._exit(0)
        m = json.loads(msg)
        if 'ping' in m:
            ctl.send(json.dumps({'pong': m['ping']}).encode())
            continue
        if not m.get('zygote') or len(fds) != 5:
            ctl.send(json.dumps({'id': m['id'], 'error': 'want a zygote with a status fd'}).encode())
            continue
        pid = os.fork()
        if pid == 0:
            gpid = os.fork()
            if gpid == 0:
                ctl.close()
                stdin, out, err, status, child = fds
                for i, fd in enumerate((stdin, out, err)):
                    os.dup2(fd, i)
                    os.close(fd)
                os.write(1, b'hello from level %d\n' % (level + 1))
                os.write(status, b'status of level %d' % (level + 1))
                os.close(status)
                serve(socket.socket(fileno=child), level + 1)
            ctl.send(json.dumps({'id': m['id'], 'pid': gpid}).encode())
            os._exit(0)
        for fd in fds:
            os.close(fd)
        os.waitpid(pid, 0)
serve(socket.socket(fileno=3), 0)
`

// TestLocalZygoteVia starts a zygote through a zygote, and one through that:
// each reports ready with its own state, streams its own stdout and status,
// answers pings, and the agent reports its exit when it is killed, while
// the one it forked lives on.
func TestLocalZygoteVia(t *testing.T) {
	const python = "/usr/bin/python3"
	l, _ := startLocal(t)
	ctx := t.Context()
	root, err := l.Start(ctx, StartRequest{Argv: []string{python, "-c", viaZygote}, Dir: "/", Zygote: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := func(via *Process) (*Process, *output, int) {
		t.Helper()
		var out output
		p, err := l.Start(ctx, StartRequest{Argv: []string{"context"}, Dir: "/", Zygote: true, Via: via.ID(), StatusFD: true}, &out)
		if err != nil {
			t.Fatalf("start through %d: %v", via.ID(), err)
		}
		var ready struct{ Level, PID int }
		if err := json.Unmarshal(p.Ready, &ready); err != nil || ready.PID != p.PID {
			t.Fatalf("ready %s (%v), want the pid %d", p.Ready, err, p.PID)
		}
		return p, &out, ready.Level
	}
	child, childOut, level := start(root)
	if level != 1 {
		t.Errorf("child at level %d, want 1", level)
	}
	grandchild, grandOut, level := start(child)
	if level != 2 {
		t.Errorf("grandchild at level %d, want 2", level)
	}
	if err := l.Reset(ctx, ResetRequest{Zygotes: []uint32{root.ID(), child.ID(), grandchild.ID()}}); err != nil {
		t.Fatalf("ping every zygote: %v", err)
	}
	if err := child.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err := child.Wait(ctx)
	if err != nil || st.Signal != int(syscall.SIGKILL) {
		t.Errorf("child ended with %+v, %v; want SIGKILL", st, err)
	}
	if got := childOut.stdout.String(); got != "hello from level 1\n" {
		t.Errorf("child's stdout %q", got)
	}
	if got := childOut.status.String(); got != "status of level 1" {
		t.Errorf("child's status %q", got)
	}
	if err := l.Reset(ctx, ResetRequest{Zygotes: []uint32{grandchild.ID()}}); err != nil {
		t.Errorf("the grandchild after its parent died: %v", err)
	}
	if err := grandchild.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := grandchild.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := grandOut.stdout.String() + grandOut.status.String(); got != "hello from level 2\nstatus of level 2" {
		t.Errorf("grandchild's stdout and status %q", got)
	}
	// Through a zygote that is gone: refused by kind.
	if _, err := l.Start(ctx, StartRequest{Argv: []string{"context"}, Zygote: true, Via: child.ID()}, nil); err == nil {
		t.Error("a start through a dead zygote succeeded")
	}
}
