package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// entry is a tar entry for tests: a directory (name ends in "/"), a file
// (body), a symlink (link) or a hard link (hard).
type entry struct {
	name, body, link, hard string
	mode                   int64
}

func layerTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: os.Getuid(), Gid: os.Getgid(), Format: tar.FormatPAX}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		case e.hard != "":
			h.Typeflag, h.Linkname = tar.TypeLink, e.hard
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandboxDirs returns a fresh root and, beside it, a directory that must
// stay empty whatever the archive does.
func sandboxDirs(t testing.TB) (rootDir, outside string) {
	base := t.TempDir()
	rootDir, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{rootDir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return rootDir, outside
}

func apply(t testing.TB, dir string, layers ...[]byte) error {
	t.Helper()
	r, err := openRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	budget := int64(1 << 30)
	for _, l := range layers {
		if _, err := applyLayer(r, bytes.NewReader(l), &budget); err != nil {
			return err
		}
	}
	return nil
}

// tree lists dir as "path" for directories/files and "path -> target"
// for links.
func tree(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			rel += " -> " + target
		case fi.IsDir():
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	sort.Strings(out)
	return out
}

func TestApplyLayerWhiteouts(t *testing.T) {
	dir, _ := sandboxDirs(t)
	lower := layerTar(t,
		entry{name: "a/"}, entry{name: "a/x", body: "x"}, entry{name: "a/y", body: "y"},
		entry{name: "b/"}, entry{name: "b/z", body: "z"}, entry{name: "b/sub/"}, entry{name: "b/sub/deep", body: "d"},
		entry{name: "c/"}, entry{name: "c/gone/"}, entry{name: "c/gone/f", body: "f"},
	)
	upper := layerTar(t,
		entry{name: "a/.wh.x"},
		// Written before the opaque marker in the same layer: kept.
		entry{name: "b/early", body: "e"},
		entry{name: "b/.wh..wh..opq"},
		entry{name: "b/new", body: "n"},
		entry{name: "c/.wh.gone"},
		// A whiteout of something that never existed is harmless.
		entry{name: ".wh.nothing"},
	)
	if err := apply(t, dir, lower, upper); err != nil {
		t.Fatal(err)
	}
	want := []string{"a/", "a/y", "b/", "b/early", "b/new", "c/"}
	if diff := cmp.Diff(want, tree(t, dir)); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

func TestApplyLayerRefusesEscapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
	}{
		{"dotdot", []entry{{name: "../evil", body: "x"}}},
		{"dotdot inside", []entry{{name: "a/../../evil", body: "x"}}},
		{"dotdot harmless-looking", []entry{{name: "a/../b", body: "x"}}},
		{"absolute", []entry{{name: "/etc/evil", body: "x"}}},
		{"absolute dir", []entry{{name: "/tmp/"}}},
		{"symlink escape", []entry{{name: "link", link: "../outside"}}},
		{"symlink escape deep", []entry{{name: "a/b/link", link: "../../../outside"}}},
		{"symlink climbs then descends", []entry{{name: "a/link", link: "x/../../../y"}}},
		{"hardlink dotdot", []entry{{name: "h", hard: "../outside/f"}}},
		{"hardlink absolute", []entry{{name: "h", hard: "/etc/passwd"}}},
		{"whiteout dotdot", []entry{{name: "a/.wh.."}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, outside := sandboxDirs(t)
			err := apply(t, dir, layerTar(t, tc.entries...))
			if !errors.Is(err, ErrUnsafeArchive) {
				t.Fatalf("err = %v, want ErrUnsafeArchive", err)
			}
			if got := tree(t, outside); len(got) > 0 {
				t.Errorf("written outside the root: %v", got)
			}
		})
	}
}

// Links inside the archive may point anywhere inside the image, absolute
// targets included; writing through them stays inside the root.
func TestApplyLayerLinksStayInside(t *testing.T) {
	dir, outside := sandboxDirs(t)
	layer := layerTar(t,
		entry{name: "etc/"},
		entry{name: "etc/passwd", body: "root:x:0:0::/:/bin/sh\n"},
		entry{name: "abs", link: "/"},
		entry{name: "abs/through-abs", body: "a"},
		entry{name: "outside/"},
		entry{name: "outside-name", link: "/" + filepath.Base(outside)},
		entry{name: "outside-name/f", body: "stays in the root"},
		entry{name: "sub/"},
		entry{name: "sub/rel", link: "../etc/passwd"},
		entry{name: "hard", hard: "etc/passwd"},
		// An entry replacing a directory with a file, and a link with a
		// directory.
		entry{name: "d/"}, entry{name: "d/x", body: "x"}, entry{name: "d", body: "now a file"},
		entry{name: "l", link: "/etc"}, entry{name: "l/"},
	)
	if err := apply(t, dir, layer); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, outside); len(got) > 0 {
		t.Fatalf("written outside the root: %v", got)
	}
	want := []string{"abs -> /", "d", "etc/", "etc/passwd", "hard", "l/", "outside-name -> /outside", "outside/", "outside/f",
		"sub/", "sub/rel -> ../etc/passwd", "through-abs"}
	if diff := cmp.Diff(want, tree(t, dir)); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
	a, _ := os.Stat(filepath.Join(dir, "hard"))
	b, _ := os.Stat(filepath.Join(dir, "etc", "passwd"))
	if !os.SameFile(a, b) {
		t.Error("hard link is not the same file")
	}
}

func TestApplyLayerBudget(t *testing.T) {
	dir, _ := sandboxDirs(t)
	r, err := openRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	budget := int64(10)
	_, err = applyLayer(r, bytes.NewReader(layerTar(t, entry{name: "big", body: strings.Repeat("x", 11)})), &budget)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestCleanEntry(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"a/b", "a/b", true},
		{"./a/b/", "a/b", true},
		{"a//b", "a/b", true},
		{".", "", true},
		{"./", "", true},
		{"a/./b", "a/b", true},
		{"..", "", false},
		{"../a", "", false},
		{"a/..", "", false},
		{"a/../b", "", false},
		{"/a", "", false},
		{"", "", false},
		{"a\x00b", "", false},
		{"..a/b", "..a/b", true},
	} {
		got, err := cleanEntry(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("cleanEntry(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestCheckLinkTarget(t *testing.T) {
	for _, tc := range []struct {
		p, target string
		ok        bool
	}{
		{"usr/bin/python3", "python3.11", true},
		{"usr/bin/x", "../lib/x", true},
		{"usr/bin/x", "../../lib/x", true},
		{"usr/bin/x", "../../../lib/x", false},
		{"x", "..", false},
		{"a/x", "..", true},
		{"a/x", "b/../../..", false},
		{"a/x", "/anything/../../..", true},
		{"etc/alternatives/awk", "/usr/bin/mawk", true},
		{"x", "", false},
	} {
		err := checkLinkTarget(tc.p, tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("checkLinkTarget(%q, %q) = %v, want ok=%v", tc.p, tc.target, err, tc.ok)
		}
	}
}

// FuzzApplyLayer: whatever an archive's names and link targets, nothing is
// written outside the root.
func FuzzApplyLayer(f *testing.F) {
	f.Add("a/b", "../../x", "a/b/c", "")
	f.Add("l", "/", "l/f", "")
	f.Add("l", "..", "l/f", "")
	f.Add("d", "../outside", "d/f", "d")
	f.Add("./x", "", "x/../../y", "x")
	f.Add("/abs", "/", "h", "../outside/f")
	f.Fuzz(func(t *testing.T, linkName, linkTarget, fileName, hardTarget string) {
		for _, s := range []string{linkName, linkTarget, fileName, hardTarget} {
			if len(s) > 200 || strings.ContainsRune(s, 0) {
				return
			}
		}
		dir, outside := sandboxDirs(t)
		if err := os.WriteFile(filepath.Join(outside, "f"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		entries := []entry{{name: "keep/", mode: 0o755}}
		if linkName != "" && linkTarget != "" {
			entries = append(entries, entry{name: linkName, link: linkTarget})
		}
		if fileName != "" {
			entries = append(entries, entry{name: fileName, body: "payload"})
		}
		if hardTarget != "" && fileName != "" {
			entries = append(entries, entry{name: path.Join("keep", "h"), hard: hardTarget})
		}
		_ = apply(t, dir, layerTar(t, entries...))
		got := tree(t, outside)
		if len(got) != 1 || got[0] != "f" {
			t.Fatalf("outside changed: %v", got)
		}
		if b, _ := os.ReadFile(filepath.Join(outside, "f")); string(b) != "keep" {
			t.Fatalf("outside file changed: %q", b)
		}
	})
}
