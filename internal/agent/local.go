//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Local mode runs the agent as an ordinary process, for tests: the frame
// handling is the sandbox's, without root, namespaces or a runtime. Its
// "sandbox" is a root directory and the agent's own descendants:
//
//   - Paths in requests (files, a process's working directory, a reset's
//     directories, a forward's socket) are the sandbox's, checked as they
//     are in a sandbox, and then taken under root: /workspace/x is
//     ROOT/workspace/x. Programs run as the current user on the host's
//     file system (no chroot); an argument or environment value that names
//     one of the sandbox's own places (/workspace, /tmp, /dev/shm, /.corral)
//     is taken under root the same way (the engine's code file in
//     /tmp/.corral, HOME=/workspace), and anything else, paths already
//     under root included, is given as is. Code that names such a path
//     itself sees the host's.
//   - The agent is a child subreaper, not an init: what a program leaves
//     behind (a zygote's children are orphans by design) is reparented to
//     it and reaped; killing what a program left signals only the agent's
//     descendants, never kill(-1).
//   - A reset clears ROOT/dev/shm, not the host's, and leaves System V
//     IPC alone: without an IPC namespace those objects are the host's.
//   - No signal shield and no PR_SET_DUMPABLE: it is any process.
//   - It runs processes and file operations as itself, as a one-shot
//     sandbox's agent does, whatever its uid; in system mode (ServeLocal's
//     system, "local-system ROOT") it is a system sandbox's agent instead,
//     which needs uid 0: it runs them as the users of ROOT/etc/passwd and
//     places files anywhere under ROOT but its /proc, /sys, /dev and
//     /.corral (users.go). Programs then run as those users on the host's
//     file system, so ROOT's directories must let them in.
//
// Only a caller that means it gets this mode: ServeLocal, or the agent
// binary's "local ROOT" arguments (Main). A runtime starts the agent with
// none but the "agent" subcommand (the bundle's args are fixed:
// internal/runtime/oci/spec.go), and then it refuses to run unless it is
// PID 1, as before. Nothing in the
// environment or the file system switches modes. A program inside a
// sandbox could start a second agent in local mode itself; that agent has
// the program's own uid, namespaces and limits and signals only its own
// descendants, so it can do nothing the program could not do anyway.

// ServeLocal runs the agent in local mode (above) on root, an existing
// directory, until the host closes the control stream; system: as a system
// sandbox's agent, which only root may be.
func ServeLocal(in io.Reader, out io.Writer, log *slog.Logger, root string, system bool) error {
	if !filepath.IsAbs(root) {
		return fmt.Errorf("local root %q is not absolute", root)
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		return fmt.Errorf("local root %q is not a directory", root)
	}
	a := newAgent(in, out, log)
	if system && a.uid != 0 {
		return fmt.Errorf("a system sandbox's agent runs as root, not uid %d", a.uid)
	}
	a.local, a.root, a.users = true, filepath.Clean(root), system
	return a.serve()
}

// hostPath is where the sandbox's path p (absolute and clean) is for the
// agent: p itself in a sandbox, under the root in local mode.
func (a *Agent) hostPath(p string) string {
	if !a.local || p == "" {
		return p
	}
	return filepath.Join(a.root, p)
}

// sandboxPlaces are the sandbox's own places, which local mode takes under
// its root wherever a program's argv or env names them.
var sandboxPlaces = []string{"/workspace", "/tmp", "/dev/shm", "/.corral", "/home/user"}

// hostValue is an argument or environment value as a program started in
// local mode gets it: v, or, if it is a path in one of sandboxPlaces (and
// not one under the root already), that path under the root.
func (a *Agent) hostValue(v string) string {
	if !a.local || v == a.root || strings.HasPrefix(v, a.root+"/") {
		return v
	}
	for _, p := range sandboxPlaces {
		if v == p || strings.HasPrefix(v, p+"/") {
			return a.root + v
		}
	}
	return v
}

// hostArgs applies hostValue to argv and to env's values, in new slices.
func (a *Agent) hostArgs(argv, env []string) ([]string, []string) {
	if !a.local {
		return argv, env
	}
	av := make([]string, len(argv))
	for i, v := range argv {
		av[i] = a.hostValue(v)
	}
	ev := make([]string, len(env))
	for i, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			kv = k + "=" + a.hostValue(v)
		}
		ev[i] = kv
	}
	return av, ev
}

// Local is an agent started in local mode as a subprocess (StartLocal).
type Local struct {
	*Client
	Cmd *exec.Cmd

	closeOnce sync.Once
	closeErr  error
}

// StartLocal starts binary (corral-agent, corral, or any program whose
// arguments "local ROOT" call Main) in local mode on root, with the control
// stream on its stdin and stdout and its stderr on stderr (nil: discarded),
// and waits for its hello. Close ends it.
func StartLocal(ctx context.Context, binary, root string, stderr io.Writer) (*Local, error) {
	return startLocalCmd(ctx, exec.Command(binary, "local", root), stderr)
}

// StartLocalSystem is StartLocal for an agent in system mode ("local-system
// ROOT"), as a system sandbox's; the caller must be root.
func StartLocalSystem(ctx context.Context, binary, root string, stderr io.Writer) (*Local, error) {
	return startLocalCmd(ctx, exec.Command(binary, "local-system", root), stderr)
}

func startLocalCmd(ctx context.Context, cmd *exec.Cmd, stderr io.Writer) (*Local, error) {
	toAgent, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("agent stdin: %w", err)
	}
	fromAgent, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("agent stdout: %w", err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agent: %w", err)
	}
	l := &Local{Client: NewClient(fromAgent, toAgent, toAgent), Cmd: cmd}
	if _, err := l.Ready(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("local agent: %w", err), l.Close())
	}
	return l, nil
}

// Close closes the control stream, so the agent kills every process it
// started and exits, and waits for it; an agent that does not exit within
// a few seconds is killed. (Killing the agent first would leave its
// programs running: they are in sessions of their own.)
func (l *Local) Close() error {
	l.closeOnce.Do(func() {
		l.Client.Close()
		done := make(chan error, 1)
		go func() { done <- l.Cmd.Wait() }()
		select {
		case l.closeErr = <-done:
		case <-time.After(5 * time.Second):
			l.Cmd.Process.Kill()
			l.closeErr = <-done
		}
	})
	return l.closeErr
}
