package images_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/testenv"
)

func TestImportDockerAndOCI(t *testing.T) {
	testenv.RequireRoot(t)
	s := newStore(t, t.TempDir(), 0)
	img := image(t, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "FOO=bar"},
		layerBytes(t, tinyFiles("one")...),
		// A second layer deleting and replacing files.
		layerBytes(t, file{name: "var/.wh.shared"}, file{name: "usr/.wh..wh..opq"}, file{name: "usr/bin/"}, file{name: "usr/bin/tool", body: "t", mode: 0o755}),
	)
	d, err := s.Import(t.Context(), dockerArchive(t, img, "corral.test/tiny:1"), images.ImportOptions{Name: "tiny-docker"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Import(t.Context(), ociArchive(t, img, "tiny-oci-ref"), images.ImportOptions{Name: "tiny-oci"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Digest != o.Digest || d.Rootfs != o.Rootfs {
		t.Errorf("the same image imported twice differs: %s at %s, %s at %s", d.Digest, d.Rootfs, o.Digest, o.Rootfs)
	}
	if d.Origin != "corral.test/tiny:1" || o.Origin != "tiny-oci-ref" {
		t.Errorf("origins %q, %q", d.Origin, o.Origin)
	}
	got, err := s.Resolve("tiny-docker")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"FOO=bar", "PATH=/usr/local/bin:/usr/bin:/bin"}, got.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	root := got.Rootfs
	// Whiteouts.
	for _, p := range []string{"var/shared", "usr/lib", "usr/local"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived a whiteout: %v", p, err)
		}
	}
	// Corral's layout.
	for _, p := range []string{"proc", "sys", "dev", "tmp", "workspace", ".corral", ".corral/cache"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil || !fi.IsDir() {
			t.Errorf("mount point /%s: %v", p, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "tmp")); len(ents) != 0 {
		t.Errorf("/tmp not emptied: %v", ents)
	}
	if fi, err := os.Lstat(filepath.Join(root, ".corral/agent")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("agent mount target: %v", err)
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	wantPasswd := "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1::/:/bin/false\nsandbox:x:1000:1000:sandbox:/workspace:/bin/sh\n"
	if string(passwd) != wantPasswd {
		t.Errorf("passwd:\n%s\nwant:\n%s", passwd, wantPasswd)
	}
	group, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if string(group) != "root:x:0:\ndaemon:x:1:\nsandbox:x:1000:\n" {
		t.Errorf("group:\n%s", group)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/shadow")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("shadow kept: %v", err)
	}
	// Read-only to the sandbox user, no privilege bits.
	err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid == 1000 || st.Gid == 1000 {
			t.Errorf("%s is owned by the sandbox user", p)
		}
		if fi.Mode()&os.ModeSymlink == 0 && (fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm()&0o002 != 0) {
			t.Errorf("%s has mode %v", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "bin/su")); fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/su mode %v", fi.Mode())
	}
}

func TestImportRefusesUnsafeArchives(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	s := newStore(t, dir, 0)
	for _, tc := range []struct {
		name  string
		files []file
	}{
		{"dotdot", []file{{name: "../../../../tmp/corral-escape", body: "x"}}},
		{"absolute", []file{{name: "/tmp/corral-escape", body: "x"}}},
		{"symlink escaping", []file{{name: "etc/"}, {name: "etc/evil", link: "../../../../tmp"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := image(t, nil, layerBytes(t, file{name: "ok", body: "fine"}), layerBytes(t, tc.files...))
			for _, archive := range []string{dockerArchive(t, img, "corral.test/evil:1"), ociArchive(t, img, "evil")} {
				_, err := s.Import(t.Context(), archive, images.ImportOptions{Name: "evil"})
				if !errors.Is(err, images.ErrUnsafeArchive) {
					t.Fatalf("err = %v, want ErrUnsafeArchive", err)
				}
				if !strings.Contains(err.Error(), "layer 2") {
					t.Errorf("error does not say where: %v", err)
				}
			}
		})
	}
	if _, err := os.Lstat("/tmp/corral-escape"); err == nil {
		t.Error("an archive wrote /tmp/corral-escape")
	}
	if list := listImages(t, s); len(list) != 0 {
		t.Errorf("refused imports left images: %v", list)
	}
	if stages, _ := filepath.Glob(filepath.Join(dir, "tmp", "stage-*")); len(stages) != 0 {
		t.Errorf("refused imports left stages: %v", stages)
	}
	if _, err := s.Resolve("evil"); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("Resolve(evil) = %v", err)
	}
}

func TestImportNotAnArchive(t *testing.T) {
	testenv.RequireRoot(t)
	s := newStore(t, t.TempDir(), 0)
	p := filepath.Join(t.TempDir(), "x.tar")
	os.WriteFile(p, layerBytes(t, file{name: "hello", body: "x"}), 0o644)
	if _, err := s.Import(t.Context(), p, images.ImportOptions{}); !errors.Is(err, images.ErrArchive) {
		t.Fatalf("err = %v, want ErrArchive", err)
	}
	if _, err := s.Import(t.Context(), p, images.ImportOptions{Name: "host"}); err == nil {
		t.Fatal("imported over the host image")
	}
}

func TestEvictLeastRecentlyUsed(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	a := importTiny(t, newStore(t, dir, 0), "a", "a")
	// Room for two such images, not three.
	budget := a.Size*5/2 + 1
	s := newStore(t, dir, budget)
	use := func(n string) {
		t.Helper()
		img, err := s.Resolve(n)
		if err != nil {
			t.Fatal(err)
		}
		release, err := s.Lock(img)
		if err != nil {
			t.Fatal(err)
		}
		release()
		time.Sleep(10 * time.Millisecond)
	}
	b := importTiny(t, s, "b", "b")
	if len(b.Evicted) != 0 {
		t.Fatalf("second image evicted %v", b.Evicted)
	}
	use("a") // b is now the least recently used
	c := importTiny(t, s, "c", "c")
	if !slices.Equal(c.Evicted, []string{"b"}) {
		t.Fatalf("third image evicted %v, want [b]", c.Evicted)
	}
	list := listImages(t, s)
	if got := names(list); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("images %v, want [a c]", got)
	}

	// An image in use is never evicted, even the least recently used.
	imgA, err := s.Resolve("a")
	if err != nil {
		t.Fatal(err)
	}
	holdA, err := s.Lock(imgA)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	use("c")
	// a is older than c only if its use before holding counts: make it so.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(filepath.Dir(imgA.Rootfs), "lock"), old, old); err != nil {
		t.Fatal(err)
	}
	list = listImages(t, s)
	if len(list) != 2 || !list[0].InUse || list[1].InUse {
		t.Fatalf("in use: %+v", list)
	}
	d := importTiny(t, s, "d", "d")
	if !slices.Equal(d.Evicted, []string{"c"}) {
		t.Fatalf("evicted %v, want [c] (a is in use)", d.Evicted)
	}
	// With everything left in use, nothing fits and nothing is evicted.
	imgD, err := s.Resolve("d")
	if err != nil {
		t.Fatal(err)
	}
	holdD, err := s.Lock(imgD)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Import(t.Context(), dockerArchive(t, image(t, nil, layerBytes(t, tinyFiles("e")...)), "corral.test/e:1"), images.ImportOptions{Name: "e"})
	if !errors.Is(err, images.ErrNoRoom) {
		t.Fatalf("err = %v, want ErrNoRoom", err)
	}
	holdA()
	holdD()
	list = listImages(t, s)
	if got := names(list); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("images %v, want [a d]", got)
	}

	// Last-used times survive a restart (a new Store over the directory).
	again := listImages(t, newStore(t, dir, budget))
	if len(again) != len(list) {
		t.Fatalf("after a restart %v, before %v", names(again), names(list))
	}
	for i := range list {
		if !again[i].LastUsed.Equal(list[i].LastUsed) {
			t.Errorf("%s last used %v, after a restart %v", list[i].Name, list[i].LastUsed, again[i].LastUsed)
		}
	}
	if !again[0].LastUsed.Equal(old) {
		t.Errorf("a's last use %v, want %v", again[0].LastUsed, old)
	}
}

func TestRemoveInUse(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	s := newStore(t, dir, 0)
	importTiny(t, s, "a", "a")
	img, _ := s.Resolve("a")
	release, err := s.Lock(img)
	if err != nil {
		t.Fatal(err)
	}
	deferred, err := s.Remove("a")
	if err != nil || !deferred {
		t.Fatalf("Remove = %v, %v; want deferred", deferred, err)
	}
	if _, err := s.Resolve("a"); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("removed image resolves: %v", err)
	}
	if _, err := os.Stat(img.Rootfs); err != nil {
		t.Errorf("files of an image in use removed: %v", err)
	}
	release()
	// The next change to the store collects it.
	importTiny(t, s, "b", "b")
	if _, err := os.Stat(img.Rootfs); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("files of a removed image kept: %v", err)
	}
	// A job resolved before a removal cannot start on it.
	img, _ = s.Resolve("b")
	if _, err := s.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(img); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("Lock of a removed image = %v", err)
	}
	if _, err := s.Remove("host"); err == nil {
		t.Error("removed the host image")
	}
	if _, err := s.Remove("nope"); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("Remove(nope) = %v", err)
	}
}

func TestImagesWithModule(t *testing.T) {
	testenv.RequireRoot(t)
	s := newStore(t, t.TempDir(), 0)
	importTiny(t, s, "tiny", "x")
	for _, tc := range []struct {
		lang, mod string
		want      []string
	}{
		{"python", "fakemod", []string{"tiny"}},
		{"python", "fakestd", []string{"tiny"}},
		{"javascript", "fakepkg", []string{"tiny"}},
		{"javascript", "@scope/pkg", []string{"tiny"}},
		{"python", "corral_no_such_module", nil},
		{"javascript", "fakemod", nil},
	} {
		if got := s.ImagesWithModule(tc.lang, tc.mod); !slices.Equal(got, tc.want) {
			t.Errorf("ImagesWithModule(%s, %s) = %v, want %v", tc.lang, tc.mod, got, tc.want)
		}
	}
}

func importTiny(t testing.TB, s *images.Store, name, marker string) images.Info {
	t.Helper()
	img := image(t, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "FOO=bar"}, layerBytes(t, tinyFiles(marker)...))
	info, err := s.Import(context.Background(), dockerArchive(t, img, "corral.test/"+name+":1"), images.ImportOptions{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// listImages is s.List, failing t on an error (an empty list would pass
// every "nothing left" check).
func listImages(t testing.TB, s *images.Store) []images.Info {
	t.Helper()
	list, err := s.List()
	if err != nil {
		t.Fatalf("list images: %v", err)
	}
	return list
}

func names(list []images.Info) []string {
	var out []string
	for _, i := range list {
		out = append(out, i.Name)
	}
	return out
}
