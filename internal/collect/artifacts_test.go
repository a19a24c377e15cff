package collect

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

type got struct {
	files map[string][]byte
}

func collect(t *testing.T, ws string, lim ArtifactLimits) (got, []Skipped) {
	t.Helper()
	g := got{files: map[string][]byte{}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	skipped, err := CollectFiles(ctx, ws, lim, func(ctx context.Context, f Found) error {
		b, err := io.ReadAll(io.LimitReader(f.File, f.Size))
		if err != nil {
			return err
		}
		g.files[f.Path] = b
		return nil
	})
	if err != nil {
		t.Fatalf("collect: %v", err)
	}
	return g, skipped
}

func mk(t *testing.T, p string, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCollectHostileOutputs(t *testing.T) {
	ws := t.TempDir()
	out := filepath.Join(ws, "output")
	secret := filepath.Join(t.TempDir(), "secret")
	mk(t, secret, "host secret")
	mk(t, filepath.Join(out, "plot.png"), "png-bytes")
	mk(t, filepath.Join(out, "sub", "data.csv"), "a,b\n1,2\n")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(secret, filepath.Join(out, "link-to-secret")))
	must(os.Symlink("/", filepath.Join(out, "link-to-root")))
	must(os.Symlink("../../", filepath.Join(out, "sub", "up")))
	must(syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644))
	must(os.Link(filepath.Join(out, "plot.png"), filepath.Join(out, "hardlink.png")))
	sparse, err := os.Create(filepath.Join(out, "sparse"))
	must(err)
	must(sparse.Truncate(1 << 40))
	sparse.Close()
	mk(t, filepath.Join(out, "new\nline"), "x")
	mk(t, filepath.Join(out, "bad\xffutf8"), "x")
	long := out
	for len(long)-len(out) < 1200 {
		long = filepath.Join(long, strings.Repeat("d", 100))
	}
	mk(t, filepath.Join(long, "deep.txt"), "x")

	g, skipped := collect(t, ws, DefaultArtifactLimits())
	var names []string
	for n := range g.files {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "hardlink.png,plot.png,sub/data.csv" {
		t.Errorf("collected %v", names)
	}
	for n, b := range g.files {
		if bytes.Contains(b, []byte("host secret")) {
			t.Errorf("%s holds host data", n)
		}
	}
	reasons := map[string]bool{}
	for _, s := range skipped {
		reasons[s.Reason] = true
		if strings.Contains(s.Path, "\n") || !utf8.ValidString(s.Path) {
			t.Errorf("skip path not sanitised: %q", s.Path)
		}
	}
	for _, want := range []string{"symbolic link (not followed)", "not a regular file", "name is not printable UTF-8", "larger than 536870912 bytes"} {
		if !reasons[want] {
			t.Errorf("no skip for %q in %+v", want, skipped)
		}
	}
}

func TestCollectOutputReplacedBySymlink(t *testing.T) {
	ws := t.TempDir()
	target := t.TempDir()
	mk(t, filepath.Join(target, "shadow"), "host")
	if err := os.Symlink(target, filepath.Join(ws, "output")); err != nil {
		t.Fatal(err)
	}
	g, skipped := collect(t, ws, DefaultArtifactLimits())
	if len(g.files) != 0 || len(skipped) != 1 {
		t.Errorf("collected %v, skipped %+v", g.files, skipped)
	}
}

// TestCollectWhileLinksFlip swaps a file for a symlink to a secret in a
// loop during collection: the secret is never read.
func TestCollectWhileLinksFlip(t *testing.T) {
	ws := t.TempDir()
	out := filepath.Join(ws, "output")
	secret := filepath.Join(t.TempDir(), "secret")
	mk(t, secret, "host secret")
	for i := 0; i < 50; i++ {
		mk(t, filepath.Join(out, fmt.Sprintf("f%02d", i)), "ok")
		mk(t, filepath.Join(out, fmt.Sprintf("d%02d", i), "x"), "ok")
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for i := 0; i < 50; i++ {
				f := filepath.Join(out, fmt.Sprintf("f%02d", i))
				d := filepath.Join(out, fmt.Sprintf("d%02d", i))
				os.Remove(f)
				os.Symlink(secret, f)
				os.RemoveAll(d)
				os.Symlink(filepath.Dir(secret), d)
				os.Remove(f)
				os.WriteFile(f, []byte("ok"), 0o644)
				os.Remove(d)
				os.MkdirAll(d, 0o755)
			}
		}
	}()
	for round := 0; round < 20; round++ {
		g, _ := collect(t, ws, DefaultArtifactLimits())
		for n, b := range g.files {
			if !bytes.Equal(b, []byte("ok")) && len(b) != 0 {
				t.Fatalf("%s: %q", n, b)
			}
		}
	}
	cancel()
	wg.Wait()
}

func TestCollectCaps(t *testing.T) {
	ws := t.TempDir()
	out := filepath.Join(ws, "output")
	for i := 0; i < 300; i++ {
		mk(t, filepath.Join(out, fmt.Sprintf("f%03d", i)), strings.Repeat("x", 100))
	}
	lim := DefaultArtifactLimits()
	lim.MaxFiles = 10
	g, skipped := collect(t, ws, lim)
	if len(g.files) != 10 || len(skipped) == 0 {
		t.Errorf("%d files, skipped %+v", len(g.files), skipped)
	}
	lim = DefaultArtifactLimits()
	lim.MaxTotalBytes = 1000
	if g, _ := collect(t, ws, lim); len(g.files) != 10 {
		t.Errorf("total cap: %d files", len(g.files))
	}
	lim = DefaultArtifactLimits()
	lim.MaxEntries = 50
	if g, _ := collect(t, ws, lim); len(g.files) > 50 {
		t.Errorf("entry cap: %d files", len(g.files))
	}
}

// TestCollectOrder: under the file cap, what sits higher in output/ wins,
// and the same tree gives the same artifacts every time.
func TestCollectOrder(t *testing.T) {
	ws := t.TempDir()
	out := filepath.Join(ws, "output")
	for i := range 50 {
		mk(t, filepath.Join(out, "a", "flood", fmt.Sprintf("%03d", i)), "x")
	}
	mk(t, filepath.Join(out, "z-report.txt"), "top")
	mk(t, filepath.Join(out, "b", "summary.txt"), "second level")
	lim := DefaultArtifactLimits()
	lim.MaxFiles = 5
	first, _ := collect(t, ws, lim)
	for _, want := range []string{"z-report.txt", "b/summary.txt"} {
		if _, ok := first.files[want]; !ok {
			t.Errorf("%s not collected before the deeper flood: %v", want, keys(first.files))
		}
	}
	for range 3 {
		again, _ := collect(t, ws, lim)
		if fmt.Sprint(keys(again.files)) != fmt.Sprint(keys(first.files)) {
			t.Fatalf("collections differ: %v then %v", keys(first.files), keys(again.files))
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
