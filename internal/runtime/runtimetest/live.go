package runtimetest

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
)

// live holds a runtime to what a sandbox that outlives one call needs from
// its agent, inside a real sandbox: a terminal (the runtime's /dev/pts and
// /dev/ptmx), the live file operations and their refusal of symbolic
// links, and watches (the runtime's inotify); a stalled stdin (stdin.go).
func live(t *testing.T, rt runtime.Runtime, env Env) {
	stalledStdin(t, rt, env)
	t.Run("Terminal", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		ctx := t.Context()
		tty := func(script string, sz agent.PTYSize) *liveOutput {
			out := newLiveOutput()
			p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: []string{"sh", "-c", script}, Env: baseEnv, Dir: "/workspace", PTY: &sz}, out)
			if err != nil {
				t.Fatalf("start %q on a terminal: %v", script, err)
			}
			out.p = p
			return out
		}

		out := tty("tty; stty size; exec 3</dev/tty && echo ctty", agent.PTYSize{Cols: 100, Rows: 30})
		if st := out.wait(t); st.Code != 0 || !strings.HasPrefix(out.String(), "/dev/pts/") || !strings.HasSuffix(out.String(), "\r\n30 100\r\nctty\r\n") {
			t.Errorf("tty under a PTY: %+v %q", st, out.String())
		}

		// stty size follows a resize.
		out = tty("read a; stty size; read b; stty size", agent.PTYSize{Cols: 80, Rows: 24})
		out.p.WriteStdin([]byte("one\n"))
		out.waitFor(t, "24 80\r\n", 1)
		if err := out.p.Resize(ctx, 132, 43); err != nil {
			t.Fatal(err)
		}
		out.p.WriteStdin([]byte("two\n"))
		if st := out.wait(t); st.Code != 0 || !strings.HasSuffix(out.String(), "\r\n43 132\r\n") {
			t.Errorf("after a resize: %+v %q", st, out.String())
		}

		// Stdin round trip through cat, on a terminal (^D ends it) and on
		// pipes.
		out = tty("exec cat", agent.PTYSize{})
		out.p.WriteStdin([]byte("round trip\n"))
		out.waitFor(t, "round trip\r\n", 2) // the terminal's echo, then cat's
		out.p.CloseStdin()
		if st := out.wait(t); st.Code != 0 {
			t.Errorf("cat on a terminal after ^D: %+v %q", st, out.String())
		}
		pipes := newLiveOutput()
		p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: []string{"cat"}, Env: baseEnv, Dir: "/workspace", Stdin: true}, pipes)
		if err != nil {
			t.Fatal(err)
		}
		pipes.p = p
		p.WriteStdin([]byte("round trip\n"))
		p.CloseStdin()
		if st := pipes.wait(t); st.Code != 0 || pipes.String() != "round trip\n" {
			t.Errorf("cat on pipes: %+v %q", st, pipes.String())
		}
	})

	t.Run("LiveFiles", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		ctx := t.Context()
		c := sb.Agent()
		if st, out := Exec(t, sb, "sh", "-c", "mkdir -p d/e && printf hi > d/f && ln -s /etc esc && ln -s d dl && echo x > /tmp/t"); st.Code != 0 {
			t.Fatalf("set up: %+v %s", st, out.ErrString())
		}

		if e, err := c.Stat(ctx, "/workspace/d/f"); err != nil || e.Type != "file" || e.Size != 2 || e.Path != "/workspace/d/f" {
			t.Errorf("stat a file: %+v %v", e, err)
		}
		if e, err := c.Stat(ctx, "/workspace/esc"); err != nil || e.Type != "symlink" || e.SymlinkTarget != "/etc" {
			t.Errorf("stat a link: %+v %v", e, err)
		}
		entries, err := c.ListDepth(ctx, "/workspace", 2)
		var got []string
		for _, e := range entries {
			got = append(got, e.Path+" "+e.Type)
		}
		want := []string{"/workspace/d dir", "/workspace/d/e dir", "/workspace/d/f file", "/workspace/dl symlink", "/workspace/esc symlink"}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("list to depth 2: %v %v, want %v", got, err, want)
		}
		if err := c.Mkdir(ctx, "/workspace/m/n", true); err != nil {
			t.Fatal(err)
		}
		if err := c.Move(ctx, "/workspace/d/f", "/workspace/m/n/f"); err != nil {
			t.Fatal(err)
		}
		if _, out := Exec(t, sb, "cat", "/workspace/m/n/f"); out.String() != "hi" {
			t.Errorf("after mkdir and move: %q", out.String())
		}
		// /workspace and /tmp are separate mounts.
		if err := c.Move(ctx, "/tmp/t", "/workspace/t"); !errors.Is(err, syscall.EXDEV) {
			t.Errorf("move from /tmp to /workspace: %v, want EXDEV", err)
		}

		// Symbolic links are never gone through: one to the image's /etc,
		// one to a directory of the sandbox's own.
		for name, do := range map[string]func() error{
			"stat through":  func() error { _, err := c.Stat(ctx, "/workspace/esc/passwd"); return err },
			"list":          func() error { _, err := c.ListDepth(ctx, "/workspace/esc", 1); return err },
			"mkdir through": func() error { return c.Mkdir(ctx, "/workspace/esc/x", true) },
			"mkdir in":      func() error { return c.Mkdir(ctx, "/workspace/dl/x", false) },
			"move from":     func() error { return c.Move(ctx, "/workspace/esc/passwd", "/workspace/passwd") },
			"move to":       func() error { return c.Move(ctx, "/workspace/m", "/workspace/esc/m") },
			"watch":         func() error { _, err := c.Watch(ctx, "/workspace/dl", false, func(agent.WatchEvent) {}); return err },
		} {
			if err := do(); !errors.Is(err, agent.KindSymlink) {
				t.Errorf("%s a link: %v, want %v", name, err, agent.KindSymlink)
			}
		}
		for _, p := range []string{"/etc", "/workspace/../etc", "/"} {
			if err := c.Mkdir(ctx, p+"/x", true); !errors.Is(err, agent.KindInvalid) {
				t.Errorf("mkdir under %s: %v", p, err)
			}
		}
		linksPlanted(t, sb)
	})

	t.Run("Watch", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		ctx := t.Context()
		deep, flat := newLiveEvents(), newLiveEvents()
		for _, w := range []struct {
			path      string
			recursive bool
			ev        *liveEvents
		}{{"/workspace", true, deep}, {"/tmp", false, flat}} {
			stop, err := sb.Agent().Watch(ctx, w.path, w.recursive, w.ev.add)
			if err != nil {
				t.Fatalf("watch %s: %v", w.path, err)
			}
			t.Cleanup(func() {
				if err := stop(); err != nil {
					t.Errorf("stop the watch of %s: %v", w.path, err)
				}
			})
		}
		// A tree made at once, then (once the agent watches it: what is
		// made in a directory before it is watched is found by a scan,
		// not seen happen) changes in it.
		var got []agent.WatchEvent
		for _, step := range []struct{ script, marker string }{
			{"mkdir -p sub/deeper && touch ready", "/workspace/ready"},
			{"echo x > sub/deeper/file && mv sub/deeper/file sub/moved && touch /tmp/t && touch marker", "/workspace/marker"},
		} {
			if st, out := Exec(t, sb, "sh", "-c", step.script); st.Code != 0 {
				t.Fatalf("%s: %+v %s", step.script, st, out.ErrString())
			}
			got = deep.waitFor(t, agent.WatchEvent{Path: step.marker, Op: agent.OpCreate})
		}
		for _, e := range []agent.WatchEvent{
			{Path: "/workspace/sub", Op: agent.OpCreate}, {Path: "/workspace/sub/deeper", Op: agent.OpCreate},
			{Path: "/workspace/sub/deeper/file", Op: agent.OpCreate}, {Path: "/workspace/sub/deeper/file", Op: agent.OpRename},
			{Path: "/workspace/sub/moved", Op: agent.OpCreate},
		} {
			if !slices.Contains(got, e) {
				t.Errorf("no %v in %v", e, got)
			}
		}
		flat.waitFor(t, agent.WatchEvent{Path: "/tmp/t", Op: agent.OpCreate})
	})
}

// linksPlanted: a write, read, listing or removal never goes through a
// link a program planted, first in the path, in its middle or last, to /,
// to /tmp (out of /workspace) or inside: each is KindSymlink, and nothing
// is written or removed where the link leads.
func linksPlanted(t *testing.T, sb runtime.Sandbox) {
	ctx := t.Context()
	c := sb.Agent()
	if st, out := Exec(t, sb, "sh", "-c", "mkdir -p lk/sub && ln -s / root && ln -s /tmp tl && ln -s /tmp lk/mid && "+
		"ln -s /tmp/keep lk/last && ln -s sub lk/in && echo keep > /tmp/keep && mkdir /tmp/kd && echo keep > /tmp/kd/f"); st.Code != 0 {
		t.Fatalf("plant links: %+v %s", st, out.ErrString())
	}
	write := func(p string) error { return c.WriteFile(ctx, p, 0o644, strings.NewReader("written")) }
	ops := map[string]func(string) error{
		"write":  write,
		"read":   func(p string) error { return c.ReadFile(ctx, p, io.Discard) },
		"list":   func(p string) error { _, err := c.List(ctx, p); return err },
		"remove": func(p string) error { return c.Remove(ctx, p) },
	}
	for _, p := range []string{"/workspace/root/tmp/new", "/workspace/root/tmp/keep", "/workspace/root/etc/passwd",
		"/workspace/root/tmp/kd", "/workspace/tl/new", "/workspace/tl/kd/f", "/workspace/lk/mid/keep", "/workspace/lk/mid/new/x",
		"/workspace/lk/in/x"} {
		for name, op := range ops {
			if err := op(p); !errors.Is(err, agent.KindSymlink) {
				t.Errorf("%s %s: %v, want %v", name, p, err, agent.KindSymlink)
			}
		}
	}
	for _, p := range []string{"/workspace/root", "/workspace/lk/last", "/workspace/lk/in"} {
		for _, name := range []string{"write", "read", "list"} {
			if err := ops[name](p); !errors.Is(err, agent.KindSymlink) {
				t.Errorf("%s %s: %v, want %v", name, p, err, agent.KindSymlink)
			}
		}
	}
	// A link at the end is removed as itself.
	if err := c.Remove(ctx, "/workspace/lk"); err != nil {
		t.Errorf("remove a tree of links: %v", err)
	}
	if err := c.Remove(ctx, "/workspace/root"); err != nil {
		t.Errorf("remove a link to /: %v", err)
	}
	if st, out := Exec(t, sb, "sh", "-c", "cat /tmp/keep /tmp/kd/f && test ! -e /tmp/new && test ! -e /workspace/lk && test ! -e /workspace/root"); st.Code != 0 || out.String() != "keep\nkeep\n" {
		t.Errorf("after the calls through links, /tmp holds %q (%+v %s)", out.String(), st, out.ErrString())
	}
}

// liveOutput collects a process's output and tells waiters when more came.
type liveOutput struct {
	Output
	p    *agent.Process
	more chan struct{}
}

func newLiveOutput() *liveOutput { return &liveOutput{more: make(chan struct{}, 1)} }

func (o *liveOutput) Stdout(b []byte) {
	o.Output.Stdout(b)
	select {
	case o.more <- struct{}{}:
	default:
	}
}

// waitFor waits until stdout holds s count times.
func (o *liveOutput) waitFor(t *testing.T, s string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for strings.Count(o.String(), s) < count {
		select {
		case <-o.more:
		case <-ctx.Done():
			t.Fatalf("stdout %q has not %d× %q", o.String(), count, s)
		}
	}
}

func (o *liveOutput) wait(t *testing.T) agent.ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := o.p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v (stdout %q)", err, o.String())
	}
	return st
}

// liveEvents collects a watch's events.
type liveEvents struct {
	mu   sync.Mutex
	got  []agent.WatchEvent
	more chan struct{}
}

func newLiveEvents() *liveEvents { return &liveEvents{more: make(chan struct{}, 1)} }

func (e *liveEvents) add(ev agent.WatchEvent) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
	select {
	case e.more <- struct{}{}:
	default:
	}
}

// waitFor waits for want and returns the events before it.
func (e *liveEvents) waitFor(t *testing.T, want agent.WatchEvent) []agent.WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		e.mu.Lock()
		got := slices.Clone(e.got)
		e.mu.Unlock()
		if i := slices.Index(got, want); i >= 0 {
			return got[:i]
		}
		select {
		case <-e.more:
		case <-ctx.Done():
			t.Fatalf("no %v in %v", want, got)
		}
	}
}
