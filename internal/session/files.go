package session

import (
	"context"
	"errors"

	"io"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/sandbox"
)

// Files of a live sandbox (or of a session) by path: absolute in the
// sandbox, under /workspace or /tmp, or relative to /workspace. The agent
// reads and writes them as the sandbox's user, in the sandbox's own view
// of its file system (internal/agent/files.go): what a program planted
// leads nowhere a program could not go.

// MaxListDepth bounds a listing's depth; maxListed its entries.
const (
	MaxListDepth = 8
	maxListed    = 10000
)

// SandboxPath maps a client's path to the sandbox's: absolute and clean,
// under /workspace or /tmp.
func SandboxPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		if err := engine.CheckInputPath(p); err != nil {
			return "", invalid("path: %v", err)
		}
		return "/workspace/" + p, nil
	}
	if len(p) > 4096 || strings.ContainsRune(p, 0) || path.Clean(p) != p {
		return "", invalid("path: give an absolute, clean path (no .., no trailing /)")
	}
	for _, root := range []string{"/workspace", "/tmp"} {
		if p == root || strings.HasPrefix(p, root+"/") {
			return p, nil
		}
	}
	return "", invalid("path: files are under /workspace or /tmp")
}

// ReadFile streams a file of tenant's sandbox (or session) id into w.
func (m *Manager) ReadFile(ctx context.Context, tenant, id, file string, w io.Writer) error {
	p, err := SandboxPath(file)
	if err != nil {
		return err
	}
	if p == "/workspace" || p == "/tmp" {
		return invalid("path: name a file")
	}
	return m.withSandbox(ctx, tenant, id, func(c *agent.Client) error { return c.ReadFile(ctx, p, w) })
}

// WriteFile writes r to a file of tenant's sandbox (or session) id,
// making its parent directories, and describes the file written.
func (m *Manager) WriteFile(ctx context.Context, tenant, id, file string, r io.Reader) (sandbox.SandboxFile, error) {
	p, err := SandboxPath(file)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	if p == "/workspace" || p == "/tmp" {
		return sandbox.SandboxFile{}, invalid("path: name a file")
	}
	cr := &countingReader{r: r}
	err = m.withSandbox(ctx, tenant, id, func(c *agent.Client) error { return c.WriteFile(ctx, p, 0o644, cr) })
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	return sandbox.SandboxFile{Path: p, Name: path.Base(p), Type: "file", Size: cr.n, Mode: 0o644, ModTime: m.now().UTC()}, nil
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

// RemoveFile removes a file or directory tree.
func (m *Manager) RemoveFile(ctx context.Context, tenant, id, file string) error {
	p, err := SandboxPath(file)
	if err != nil {
		return err
	}
	if p == "/workspace" || p == "/tmp" {
		return invalid("path: the top directories cannot be removed")
	}
	return m.withSandbox(ctx, tenant, id, func(c *agent.Client) error { return c.Remove(ctx, p) })
}

// StatFile describes one file or directory.
func (m *Manager) StatFile(ctx context.Context, tenant, id, file string) (sandbox.SandboxFile, error) {
	p, err := SandboxPath(file)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	var out sandbox.SandboxFile
	err = m.withSandbox(ctx, tenant, id, func(c *agent.Client) error {
		out, err = stat(ctx, c, p)
		return err
	})
	return out, err
}

// stat finds p in its directory's listing.
func stat(ctx context.Context, c *agent.Client, p string) (sandbox.SandboxFile, error) {
	if p == "/workspace" || p == "/tmp" {
		return sandbox.SandboxFile{Path: p, Name: path.Base(p), Type: "dir", Mode: 0o755}, nil
	}
	dir := path.Dir(p)
	entries, err := c.List(ctx, dir)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	for _, e := range entries {
		if e.Name == path.Base(p) {
			return fileOf(dir, e), nil
		}
	}
	return sandbox.SandboxFile{}, &agent.RemoteError{Kind: agent.Kind("ENOENT"), Message: "stat " + p + ": not in its directory"}
}

func fileOf(dir string, e agent.Entry) sandbox.SandboxFile {
	return sandbox.SandboxFile{Path: path.Join(dir, e.Name), Name: e.Name, Type: e.Type, Size: e.Size, Mode: e.Mode, ModTime: e.ModTime}
}

// ListFiles lists a directory, and its subdirectories down to depth
// levels (1: the directory's own entries), by path; links are listed, not
// followed.
func (m *Manager) ListFiles(ctx context.Context, tenant, id, dir string, depth int) ([]sandbox.SandboxFile, error) {
	p, err := SandboxPath(dir)
	if err != nil {
		return nil, err
	}
	if depth < 1 || depth > MaxListDepth {
		return nil, invalid("depth: must be between 1 and %d", MaxListDepth)
	}
	out := []sandbox.SandboxFile{}
	err = m.withSandbox(ctx, tenant, id, func(c *agent.Client) error {
		type level struct {
			dir   string
			depth int
		}
		todo := []level{{p, 1}}
		for len(todo) > 0 {
			l := todo[0]
			todo = todo[1:]
			entries, err := c.List(ctx, l.dir)
			if err != nil {
				var re *agent.RemoteError
				if l.dir != p && errors.As(err, &re) && (errors.Is(re, syscall.ENOENT) || errors.Is(re, syscall.EACCES)) {
					continue // gone meanwhile, or closed by a program
				}
				return err
			}
			for _, e := range entries {
				f := fileOf(l.dir, e)
				out = append(out, f)
				if e.Type == "dir" && l.depth < depth {
					todo = append(todo, level{f.Path, l.depth + 1})
				}
				if len(out) >= maxListed {
					return nil
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b sandbox.SandboxFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// Sandboxes describes this node's live sandboxes of tenant, by id.
func (m *Manager) Sandboxes(tenant string) []sandbox.SandboxInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []sandbox.SandboxInfo
	for _, e := range m.sessions {
		if e.info.Tenant == tenant && e.live != nil && !e.gone && !m.now().After(e.info.ExpiresAt) {
			out = append(out, m.describeLocked(e))
		}
	}
	slices.SortFunc(out, func(a, b sandbox.SandboxInfo) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	return out
}
