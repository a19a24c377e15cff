//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tree makes files (content "x"), directories (a trailing /) and links
// ("name -> target") under dir.
func tree(t *testing.T, dir string, specs ...string) {
	t.Helper()
	for _, s := range specs {
		p := filepath.Join(dir, s)
		var err error
		switch name, target, link := strings.Cut(s, " -> "); {
		case link:
			err = os.Symlink(target, filepath.Join(dir, name))
		case strings.HasSuffix(s, "/"):
			err = os.MkdirAll(p, 0o755)
		default:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.WriteFile(p, []byte("x"), 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func paths(entries []Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Path
		if e.SymlinkTarget != "" {
			out[i] += " -> " + e.SymlinkTarget
		}
	}
	return out
}

func TestLocalStat(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")
	tree(t, ws, "d/f.txt", "d/e/", "up -> /etc", "in -> d", "d/abs -> /workspace/d/f.txt")
	if err := os.Chmod(filepath.Join(ws, "d/f.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(ws, "d/f.txt"))

	e, err := l.Stat(ctx, "/workspace/d/f.txt")
	want := Entry{Name: "f.txt", Path: "/workspace/d/f.txt", Size: 1, Mode: 0o640, ModTime: fi.ModTime().UTC(), Type: "file"}
	if err != nil || !cmp.Equal(e, want) {
		t.Errorf("stat a file: %v %s", err, cmp.Diff(want, e))
	}
	for _, c := range []struct{ path, typ, target string }{
		{"/workspace", "dir", ""},
		{"/tmp", "dir", ""},
		{"/workspace/d", "dir", ""},
		{"/workspace/up", "symlink", "/etc"},
		{"/workspace/in", "symlink", "d"},
		{"/workspace/d/abs", "symlink", "/workspace/d/f.txt"},
	} {
		e, err := l.Stat(ctx, c.path)
		if err != nil || e.Type != c.typ || e.SymlinkTarget != c.target || e.Path != c.path || e.Name != filepath.Base(c.path) || e.Dir != (c.typ == "dir") {
			t.Errorf("stat %s: %+v %v", c.path, e, err)
		}
	}
	for _, c := range []struct {
		path string
		kind error
	}{
		{"/workspace/missing", syscall.ENOENT},
		{"/workspace/missing/x", syscall.ENOENT},
		{"/workspace/d/f.txt/x", syscall.ENOTDIR},
		{"/workspace/up/passwd", KindSymlink},
		{"/workspace/in/f.txt", KindSymlink},
		{"/etc/passwd", KindInvalid},
		{"/", KindInvalid},
		{"/workspace/../etc", KindInvalid},
		{"workspace", KindInvalid},
		{"/workspacex", KindInvalid},
		{"/workspace/" + strings.Repeat("n", 300), syscall.ENAMETOOLONG},
		{"/workspace/nul\x00", KindInvalid},
	} {
		if e, err := l.Stat(ctx, c.path); !errors.Is(err, c.kind) {
			t.Errorf("stat %q: %+v %v, want %v", c.path, e, err, c.kind)
		}
	}
}

func TestLocalListDepth(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")
	tree(t, ws, "b/c/d/e.txt", "b/c/f.txt", "b/g.txt", "a.txt", "z/", "up -> /", "b/in -> c")
	// A directory the sandbox's user cannot read is listed, not entered.
	tree(t, ws, "z/hidden/secret")
	if err := os.Chmod(filepath.Join(ws, "z/hidden"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(ws, "z/hidden"), 0o755) })
	hidden := ""
	if os.Geteuid() == 0 {
		hidden = "/workspace/z/hidden/secret" // root reads it anyway
	}

	for _, c := range []struct {
		depth int
		want  []string
	}{
		{1, []string{"/workspace/a.txt", "/workspace/b", "/workspace/up -> /", "/workspace/z"}},
		{2, []string{"/workspace/a.txt", "/workspace/b", "/workspace/b/c", "/workspace/b/g.txt", "/workspace/b/in -> c",
			"/workspace/up -> /", "/workspace/z", "/workspace/z/hidden"}},
		{MaxListDepth, []string{"/workspace/a.txt", "/workspace/b", "/workspace/b/c", "/workspace/b/c/d", "/workspace/b/c/d/e.txt",
			"/workspace/b/c/f.txt", "/workspace/b/g.txt", "/workspace/b/in -> c", "/workspace/up -> /", "/workspace/z",
			"/workspace/z/hidden", hidden}},
	} {
		entries, err := l.ListDepth(ctx, "/workspace", c.depth)
		want := c.want
		if want[len(want)-1] == "" {
			want = want[:len(want)-1]
		}
		if err != nil || !cmp.Equal(paths(entries), want) {
			t.Errorf("list depth %d: %v %s", c.depth, err, cmp.Diff(want, paths(entries)))
		}
	}
	entries, err := l.ListDepth(ctx, "/workspace/b/c", 1)
	if err != nil || len(entries) != 2 || entries[0].Name != "d" || !entries[0].Dir || entries[1].Name != "f.txt" || entries[1].Size != 1 || entries[1].Type != "file" {
		t.Errorf("list /workspace/b/c: %+v %v", entries, err)
	}
	if entries, err := l.ListDepth(ctx, "/tmp", 3); err != nil || len(entries) != 0 || entries == nil {
		t.Errorf("list an empty /tmp: %#v %v", entries, err)
	}
	for _, c := range []struct {
		path  string
		depth int
		kind  error
	}{
		{"/workspace", 0, KindInvalid},
		{"/workspace", MaxListDepth + 1, KindInvalid},
		{"/workspace/up", 1, KindSymlink},
		{"/workspace/up/etc", 1, KindSymlink},
		{"/workspace/b/in", 2, KindSymlink},
		{"/workspace/a.txt", 1, syscall.ENOTDIR},
		{"/workspace/none", 1, syscall.ENOENT},
		{"/etc", 1, KindInvalid},
	} {
		if _, err := l.ListDepth(ctx, c.path, c.depth); !errors.Is(err, c.kind) {
			t.Errorf("list %s to depth %d: %v, want %v", c.path, c.depth, err, c.kind)
		}
	}
}

// TestLocalListMany: listings stream, so MaxListEntries entries with long
// names (far more than a frame holds) arrive, and no more.
func TestLocalListMany(t *testing.T) {
	l, root := startLocal(t)
	many := filepath.Join(root, "workspace", "many")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range MaxListEntries + 5 {
		name := fmt.Sprintf("%05d-%s", i, strings.Repeat("n", 100))
		if err := os.WriteFile(filepath.Join(many, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, list := range []func() ([]Entry, error){
		func() ([]Entry, error) { return l.List(t.Context(), "/workspace/many") },
		func() ([]Entry, error) { return l.ListDepth(t.Context(), "/workspace/many", 1) },
		func() ([]Entry, error) { return l.ListDepth(t.Context(), "/workspace", 2) },
	} {
		entries, err := list()
		if err != nil || len(entries) != MaxListEntries {
			t.Errorf("listing %d entries: got %d, %v", MaxListEntries+5, len(entries), err)
		}
	}
}

func TestLocalMkdir(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")
	tree(t, ws, "f", "d/", "up -> ../tmp", "dl -> d")

	isDir := func(p string) bool {
		st, err := os.Lstat(filepath.Join(root, p))
		return err == nil && st.IsDir()
	}
	if err := l.Mkdir(ctx, "/workspace/new", false); err != nil || !isDir("workspace/new") {
		t.Errorf("mkdir: %v", err)
	}
	if err := l.Mkdir(ctx, "/workspace/a/b/c", true); err != nil || !isDir("workspace/a/b/c") {
		t.Errorf("mkdir with parents: %v", err)
	}
	if err := l.Mkdir(ctx, "/workspace/a/b", true); err != nil {
		t.Errorf("mkdir with parents of one that exists: %v", err)
	}
	if err := l.Mkdir(ctx, "/tmp/t", false); err != nil || !isDir("tmp/t") {
		t.Errorf("mkdir in /tmp: %v", err)
	}
	for _, c := range []struct {
		path    string
		parents bool
		kind    error
	}{
		{"/workspace/new", false, syscall.EEXIST},
		{"/workspace/f", false, syscall.EEXIST},
		{"/workspace/f", true, syscall.EEXIST},
		{"/workspace/x/y", false, syscall.ENOENT},
		{"/workspace/f/y", true, syscall.ENOTDIR},
		{"/workspace/up/x", true, KindSymlink},
		{"/workspace/up/x", false, KindSymlink},
		{"/workspace/dl", true, KindSymlink},
		{"/workspace/dl/x", false, KindSymlink},
		{"/workspace", true, KindInvalid},
		{"/etc/x", true, KindInvalid},
		{"/workspace/./x", true, KindInvalid},
	} {
		if err := l.Mkdir(ctx, c.path, c.parents); !errors.Is(err, c.kind) {
			t.Errorf("mkdir %s (parents %v): %v, want %v", c.path, c.parents, err, c.kind)
		}
	}
	if isDir("tmp/x") {
		t.Error("mkdir went through a link")
	}
}

func TestLocalMove(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	ws := filepath.Join(root, "workspace")
	tree(t, ws, "a/f.txt", "b/", "c/old", "up -> /etc", "link -> a/f.txt")
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(root, p)); return err == nil }

	if err := l.Move(ctx, "/workspace/a/f.txt", "/workspace/b/g.txt"); err != nil || exists("workspace/a/f.txt") || !exists("workspace/b/g.txt") {
		t.Errorf("move a file across directories: %v", err)
	}
	if err := l.Move(ctx, "/workspace/b", "/workspace/a/b2"); err != nil || !exists("workspace/a/b2/g.txt") {
		t.Errorf("move a directory: %v", err)
	}
	// A link moves itself; its target stays.
	if err := l.Move(ctx, "/workspace/link", "/workspace/c/link"); err != nil {
		t.Errorf("move a link: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(ws, "c/link")); err != nil || target != "a/f.txt" {
		t.Errorf("the moved link: %q %v", target, err)
	}
	// What is at the destination is replaced, as rename(2) does.
	tree(t, ws, "r1", "r2")
	if err := l.Move(ctx, "/workspace/r1", "/workspace/r2"); err != nil || exists("workspace/r1") {
		t.Errorf("move over a file: %v", err)
	}
	for _, c := range []struct {
		from, to string
		kind     error
	}{
		{"/workspace/none", "/workspace/x", syscall.ENOENT},
		{"/workspace/up/passwd", "/workspace/passwd", KindSymlink},
		{"/workspace/c/old", "/workspace/up/old", KindSymlink},
		{"/workspace/a", "/workspace/a/inside", syscall.EINVAL},
		{"/workspace/c", "/workspace/a", syscall.ENOTEMPTY},
		{"/workspace/c/old", "/etc/old", KindInvalid},
		{"/etc/passwd", "/workspace/passwd", KindInvalid},
		{"/workspace", "/tmp/ws", KindInvalid},
		{"/workspace/c/old", "/workspace", KindInvalid},
		{"/workspace/c/old", "relative", KindInvalid},
	} {
		if err := l.Move(ctx, c.from, c.to); !errors.Is(err, c.kind) {
			t.Errorf("move %s to %s: %v, want %v", c.from, c.to, err, c.kind)
		}
	}
	if !exists("workspace/c/old") {
		t.Error("a refused move lost its source")
	}
}
