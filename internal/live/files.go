package live

import (
	"context"

	"io"
	"path"
	"strings"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// Files of a live sandbox by path: absolute in the sandbox (anywhere but
// its kernel's and Corral's own: /proc, /sys, /dev, /.corral), or relative
// to /workspace. The agent
// reads and writes them as the sandbox's user, in the sandbox's own view
// of its file system (internal/agent/files.go): what a program planted
// leads nowhere a program could not go.

// UserHome is the sandbox user's home. E2B's SDKs resolve relative paths
// and run commands there; Corral's own API keeps /workspace for both.
const UserHome = "/home/user"

// MaxListDepth bounds a listing's depth.
const MaxListDepth = agent.MaxListDepth

// SandboxPath maps a client's path to the sandbox's: absolute and clean,
// outside systemPaths.
func SandboxPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		if err := validate.CheckInputPath(p); err != nil {
			return "", workspace.Invalid("path: %v", err)
		}
		return "/workspace/" + p, nil
	}
	if err := validate.CheckAbsPath(p); err != nil {
		return "", ErrInvalid.With("path", "path: %v", err)
	}
	for _, root := range systemPaths {
		if p == root || strings.HasPrefix(p, root+"/") {
			return "", workspace.Invalid("path: %s is the sandbox's kernel's or Corral's, not a file system to change", root)
		}
	}
	return p, nil
}

// systemPaths are where no file call goes: the kernel's interfaces and
// Corral's own mounts.
var systemPaths = []string{"/proc", "/sys", "/dev", "/.corral"}

// ReadFile streams a file of the sandbox into w.
func (s *Sandbox) ReadFile(ctx context.Context, file string, w io.Writer) error {
	p, err := SandboxPath(file)
	if err != nil {
		return err
	}
	if isTop(p) {
		return workspace.Invalid("path: name a file")
	}
	return s.withAgent(ctx, func(c *agent.Client) error { return c.ReadFile(ctx, p, w) })
}

// writeFile writes r to a file of the sandbox,
// making its parent directories, and describes the file written.
func (s *Sandbox) writeFile(ctx context.Context, file string, r io.Reader) (sandbox.SandboxFile, error) {
	p, err := SandboxPath(file)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	if isTop(p) {
		return sandbox.SandboxFile{}, workspace.Invalid("path: name a file")
	}
	cr := &countingReader{r: r}
	err = s.withAgent(ctx, func(c *agent.Client) error { return c.WriteFile(ctx, p, 0o644, cr) })
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	return sandbox.SandboxFile{Path: p, Name: path.Base(p), Type: "file", Size: cr.n, Mode: 0o644, ModTime: s.m.table.Now().UTC()}, nil
}

// countingReader counts what it reads.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// removeFile removes a file or directory tree.
func (s *Sandbox) removeFile(ctx context.Context, file string) error {
	p, err := SandboxPath(file)
	if err != nil {
		return err
	}
	if isTop(p) {
		return workspace.Invalid("path: the top directories cannot be removed")
	}
	return s.withAgent(ctx, func(c *agent.Client) error { return c.Remove(ctx, p) })
}

// StatFile describes one file or directory.
func (s *Sandbox) StatFile(ctx context.Context, file string) (sandbox.SandboxFile, error) {
	p, err := SandboxPath(file)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	var out sandbox.SandboxFile
	err = s.withAgent(ctx, func(c *agent.Client) error {
		out, err = stat(ctx, c, p)
		return err
	})
	return out, err
}

// stat describes p (links described, not followed).
func stat(ctx context.Context, c *agent.Client, p string) (sandbox.SandboxFile, error) {
	e, err := c.Stat(ctx, p)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	return fileOf(e), nil
}

func fileOf(e agent.Entry) sandbox.SandboxFile {
	return sandbox.SandboxFile{Path: e.Path, Name: e.Name, Type: e.Type, Size: e.Size, Mode: e.Mode, ModTime: e.ModTime,
		SymlinkTarget: e.SymlinkTarget}
}

// ListFiles lists a directory, and its subdirectories down to depth
// levels (1: the directory's own entries), by path; links are listed, not
// followed.
func (s *Sandbox) ListFiles(ctx context.Context, dir string, depth int) ([]sandbox.SandboxFile, error) {
	p, err := SandboxPath(dir)
	if err != nil {
		return nil, err
	}
	if depth < 1 || depth > MaxListDepth {
		return nil, workspace.Invalid("depth: must be between 1 and %d", MaxListDepth)
	}
	out := []sandbox.SandboxFile{}
	err = s.withAgent(ctx, func(c *agent.Client) error {
		entries, err := c.ListDepth(ctx, p, depth)
		for _, e := range entries {
			out = append(out, fileOf(e))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MakeDir makes a directory (with parents, those on the way too; then one
// already there is no error) and describes it.
func (s *Sandbox) MakeDir(ctx context.Context, dir string, parents bool) (sandbox.SandboxFile, error) {
	p, err := SandboxPath(dir)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	var out sandbox.SandboxFile
	err = s.withAgent(ctx, func(c *agent.Client) error {
		if err := c.Mkdir(ctx, p, parents); err != nil {
			return err
		}
		out, err = stat(ctx, c, p)
		return err
	})
	return out, err
}

// move renames a file or directory (what is at the destination is
// replaced as rename(2) does) and describes it at its new path.
func (s *Sandbox) move(ctx context.Context, from, to string) (sandbox.SandboxFile, error) {
	src, err := SandboxPath(from)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	dst, err := SandboxPath(to)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	for _, p := range []string{src, dst} {
		if isTop(p) {
			return sandbox.SandboxFile{}, workspace.Invalid("path: the top directories cannot be moved")
		}
	}
	var out sandbox.SandboxFile
	err = s.withAgent(ctx, func(c *agent.Client) error {
		if err := c.Move(ctx, src, dst); err != nil {
			return err
		}
		out, err = stat(ctx, c, dst)
		return err
	})
	return out, err
}

// Watch reports changes under a directory of the sandbox to
// fn (agent.Client.Watch) until stop is called, ctx ends, or the watch ends
// by itself (a last event with op "end").
func (s *Sandbox) Watch(ctx context.Context, dir string, recursive bool, fn func(sandbox.FileEvent)) (stop func() error, err error) {
	p, err := SandboxPath(dir)
	if err != nil {
		return nil, err
	}
	c, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	return c.Watch(ctx, p, recursive, func(ev agent.WatchEvent) { fn(sandbox.FileEvent{Path: ev.Path, Op: ev.Op}) })
}

// agent returns the running sandbox's agent, unless the sandbox expired.
func (s *Sandbox) agent(ctx context.Context) (*agent.Client, error) {
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return nil, err
	}
	return s.Agent(ctx)
}

// withAgent runs f with the running sandbox's agent, used beside whatever
// runs in it.
func (s *Sandbox) withAgent(ctx context.Context, f func(c *agent.Client) error) error {
	c, err := s.agent(ctx)
	if err != nil {
		return err
	}
	return f(c)
}

// isTop says whether p is the root or a mount point of the sandbox's disk:
// not a file to read, write, move or remove.
func isTop(p string) bool { return p == "/" || p == "/workspace" || p == "/tmp" }
