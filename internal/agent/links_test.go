//go:build linux

package agent

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/fault"
)

// snapshot is every path under dir with what it holds (a file's content,
// a link's target, "dir/" for a directory).
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			rel += " -> " + target
		case fi.IsDir():
			rel += "/"
		default:
			b, _ := os.ReadFile(p)
			rel += " " + string(b)
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLocalLinks: no file call goes through a symbolic link a program
// planted, at any position of the path (the first component, one in the
// middle, the last), whether it leads out of the sandbox (here: a
// directory of the host; in a sandbox, its own /tmp or /), to / or
// inside: each is refused as KindSymlink (a 400 on every wire) and
// nothing outside changes. A link at the end is described by stat,
// removed and moved as itself. runtimetest's LiveFiles holds both real
// tiers to the same.
func TestLocalLinks(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")
	out := t.TempDir()
	tree(t, out, "canary", "dir/canary")
	before := snapshot(t, out)
	// out again, through a link to /.
	viaRoot := "/workspace/up" + out
	tree(t, ws, "d/f", "d/e/", "up -> /", "out -> "+out, "d/mid -> "+out, "d/in -> e",
		"last -> "+out+"/canary", "lastdir -> "+out+"/dir", "in -> d/f")

	write := func(p string) error { return l.WriteFile(ctx, p, 0o644, strings.NewReader("written")) }
	read := func(p string) error { return l.ReadFile(ctx, p, io.Discard) }
	list := func(p string) error { _, err := l.List(ctx, p); return err }
	listDepth := func(p string) error { _, err := l.ListDepth(ctx, p, 2); return err }
	stat := func(p string) error { _, err := l.Stat(ctx, p); return err }
	mkdir := func(p string) error { return l.Mkdir(ctx, p, false) }
	mkdirAll := func(p string) error { return l.Mkdir(ctx, p+"/sub", true) }
	moveFrom := func(p string) error { return l.Move(ctx, p, "/workspace/moved") }
	moveTo := func(p string) error { return l.Move(ctx, "/workspace/d/f", p) }
	watch := func(p string) error {
		stop, err := l.Watch(ctx, p, true, func(WatchEvent) {})
		if err == nil {
			stop()
		}
		return err
	}
	remove := func(p string) error { return l.Remove(ctx, p) }
	ops := map[string]func(string) error{"write": write, "read": read, "list": list, "list to a depth": listDepth,
		"stat": stat, "mkdir": mkdir, "mkdir with parents": mkdirAll, "move from": moveFrom, "move to": moveTo,
		"watch": watch, "remove": remove}

	// Through a link: the first component, one in the middle; out of the
	// sandbox, to /, inside.
	for _, p := range []string{
		"/workspace/out/canary", "/workspace/out/dir/canary", "/workspace/out/new",
		viaRoot + "/canary", viaRoot + "/dir", viaRoot + "/new",
		"/workspace/d/mid/canary", "/workspace/d/mid/dir/canary", "/workspace/d/mid/new/deeper",
		"/workspace/d/in/x", "/workspace/lastdir/canary",
	} {
		for name, op := range ops {
			if err := op(p); !errors.Is(err, KindSymlink) {
				t.Errorf("%s %s: %v, want %v", name, p, err, KindSymlink)
			}
		}
	}
	// A link at the end: refused by what would go through it.
	for _, p := range []string{"/workspace/last", "/workspace/lastdir", "/workspace/in", "/workspace/up"} {
		for name, op := range map[string]func(string) error{"write": write, "read": read, "list": list,
			"list to a depth": listDepth, "mkdir with parents": mkdirAll, "watch": watch} {
			if err := op(p); !errors.Is(err, KindSymlink) {
				t.Errorf("%s %s: %v, want %v", name, p, err, KindSymlink)
			}
		}
		if err := mkdir(p); !errors.Is(err, syscall.EEXIST) {
			t.Errorf("mkdir %s: %v, want EEXIST", p, err)
		}
		if e, err := l.Stat(ctx, p); err != nil || e.Type != "symlink" {
			t.Errorf("stat %s: %+v %v, want the link described", p, e, err)
		}
	}
	// Moved and removed as itself.
	if err := l.Move(ctx, "/workspace/last", "/workspace/d/last"); err != nil {
		t.Errorf("move a link: %v", err)
	}
	if err := l.Move(ctx, "/workspace/d/f", "/workspace/lastdir"); err != nil {
		t.Errorf("move over a link: %v", err)
	}
	if err := l.Remove(ctx, "/workspace/d/last"); err != nil {
		t.Errorf("remove a link: %v", err)
	}
	if err := l.Remove(ctx, "/workspace/up"); err != nil {
		t.Errorf("remove a link to /: %v", err)
	}
	// A tree holding links: removed, what they lead to kept.
	tree(t, ws, "t/a/b/f", "t/a/out -> "+out, "t/a/dir -> "+out+"/dir", "t/root -> /")
	if err := l.Remove(ctx, "/workspace/t"); err != nil {
		t.Errorf("remove a tree with links: %v", err)
	}
	if after := snapshot(t, out); !slices.Equal(after, before) {
		t.Errorf("outside the sandbox: %q, was %q", after, before)
	}
	if got := snapshot(t, ws); !slices.Equal(got, []string{"./", "d/", "d/e/", "d/in -> e", "d/mid -> " + out, "in -> d/f", "lastdir x", "out -> " + out}) {
		t.Errorf("the workspace holds %q", got)
	}
}

// TestLocalHostilePaths: what a hostile path or a program's leftovers make
// a file call fail with is a kind the host answers with a 4xx, never an
// internal error: a path through a file, names and paths too long, a
// socket, a directory its user cannot enter.
func TestLocalHostilePaths(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")
	tree(t, ws, "f", "locked/x", "d/")
	ln, err := net.Listen("unix", filepath.Join(ws, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(filepath.Join(ws, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(ws, "locked"), 0o755) })

	longName := "/workspace/" + strings.Repeat("n", 5000)
	longPath := "/workspace" + strings.Repeat("/d", 2500)
	write := func(p string) error { return l.WriteFile(ctx, p, 0o644, strings.NewReader("x")) }
	read := func(p string) error { return l.ReadFile(ctx, p, io.Discard) }
	list := func(p string) error { _, err := l.List(ctx, p); return err }
	for _, c := range []struct {
		op   string
		do   func(string) error
		path string
		want error
	}{
		{"write", write, "/workspace/f/x", syscall.ENOTDIR},
		{"read", read, "/workspace/f/x", syscall.ENOTDIR},
		{"list", list, "/workspace/f", syscall.ENOTDIR},
		{"remove", func(p string) error { return l.Remove(ctx, p) }, "/workspace/f/x", syscall.ENOTDIR},
		{"mkdir", func(p string) error { return l.Mkdir(ctx, p, true) }, "/workspace/f/x", syscall.ENOTDIR},
		{"move", func(p string) error { return l.Move(ctx, "/workspace/d", p) }, "/workspace/f/x", syscall.ENOTDIR},
		{"stat", func(p string) error { _, err := l.Stat(ctx, p); return err }, "/workspace/f/x", syscall.ENOTDIR},
		{"write", write, longName, syscall.ENAMETOOLONG},
		{"write", write, longName + "/x", syscall.ENAMETOOLONG},
		{"write", write, "/workspace/" + strings.Repeat("n", 300), syscall.ENAMETOOLONG},
		{"write", write, longPath, syscall.ENAMETOOLONG},
		{"read", read, longName, syscall.ENAMETOOLONG},
		{"read", read, "/workspace/" + strings.Repeat("n", 300), syscall.ENAMETOOLONG},
		{"remove", func(p string) error { return l.Remove(ctx, p) }, "/workspace/" + strings.Repeat("n", 300), syscall.ENAMETOOLONG},
		{"read", read, "/workspace/sock", syscall.ENXIO},
		{"list", list, "/workspace/sock", syscall.ENOTDIR},
		{"write", write, "/workspace/sock", nil},
	} {
		err := c.do(c.path)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s %.40s: %v", c.op, c.path, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s %.40s: %v, want %v", c.op, c.path, err, c.want)
		}
		if f := fault.Of(err); f.Kind == fault.Internal {
			t.Errorf("%s %.40s: %v is an internal error", c.op, c.path, err)
		}
	}
	if os.Geteuid() != 0 { // root enters it anyway
		for name, err := range map[string]error{
			"write": write("/workspace/locked/y"), "read": read("/workspace/locked/x"),
			"remove": l.Remove(ctx, "/workspace/locked/x"), "list": list("/workspace/locked"),
		} {
			if f := fault.Of(err); !errors.Is(err, syscall.EACCES) || f.Kind != fault.PermissionDenied {
				t.Errorf("%s in a directory its user cannot enter: %v (%v)", name, err, f.Kind)
			}
		}
	}
	// A directory its user cannot read is removed when empty, as rmdir(2)
	// would.
	tree(t, ws, "empty/")
	if err := os.Chmod(filepath.Join(ws, "empty"), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(ctx, "/workspace/empty"); err != nil {
		t.Errorf("remove an empty directory its user cannot read: %v", err)
	}
}
