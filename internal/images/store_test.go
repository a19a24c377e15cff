package images_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// file is a tar entry: a directory (name ends in "/"), a file, a symlink.
type file struct {
	name, body, link string
	mode             int64
	uid              int
}

func layerBytes(t testing.TB, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, Format: tar.FormatPAX}
		switch {
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		case strings.HasSuffix(f.name, "/"):
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
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
		io.WriteString(tw, f.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// image makes an image of raw layers with env in its config.
func image(t testing.TB, env []string, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Env = env
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// dockerArchive writes img as `docker save` would.
func dockerArchive(t testing.TB, img v1.Image, tag string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.tar")
	ref, err := name.ParseReference(tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// ociArchive writes img as an OCI image layout, tarred.
func ociArchive(t testing.TB, img v1.Image, ref string) string {
	t.Helper()
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "oci.tar")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(out)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	return p
}

// tinyFiles is a small root filesystem with what the layout must fix.
func tinyFiles(marker string) []file {
	return []file{
		{name: "bin/"},
		{name: "bin/hello", body: "#!/bin/sh\necho hello\n", mode: 0o755},
		{name: "bin/su", body: "pretend setuid", mode: 0o4755},
		{name: "etc/"},
		{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\nsandbox:x:1001:1001::/:/bin/sh\ndaemon:x:1:1::/:/bin/false\n"},
		{name: "etc/group", body: "root:x:0:\nnode:x:1000:\ndaemon:x:1:\n"},
		{name: "etc/shadow", body: "root:secret:::::::\n", mode: 0o600},
		{name: "etc/marker", body: marker},
		{name: "home/"},
		{name: "home/node/", uid: 1000},
		{name: "home/node/owned", body: "mine", uid: 1000},
		{name: "var/"},
		{name: "var/shared", body: "anyone", mode: 0o666},
		{name: "tmp/", mode: 0o1777},
		{name: "tmp/junk", body: "left over"},
		{name: "usr/"},
		{name: "usr/lib/python3/dist-packages/fakemod/__init__.py", body: ""},
		{name: "usr/lib/python3.11/fakestd.py", body: ""},
		{name: "usr/local/lib/node_modules/fakepkg/package.json", body: "{}"},
		{name: "usr/local/lib/node_modules/@scope/pkg/package.json", body: "{}"},
	}
}

func newStore(t testing.TB, dir string, budget int64) *images.Store {
	return images.New(images.Config{Dir: dir, UID: 1000, GID: 1000, Budget: budget})
}

func TestDefaultImage(t *testing.T) {
	s := images.New(images.Config{Dir: t.TempDir(), Defaults: map[string]string{"python": "python"}})
	if s.DefaultImage("python") != "python" || s.DefaultImage("bash") != images.HostName {
		t.Errorf("defaults: python %s, bash %s", s.DefaultImage("python"), s.DefaultImage("bash"))
	}
	if _, err := s.Resolve("python"); !errors.Is(err, images.ErrNotFound) || !strings.Contains(err.Error(), `"python"`) {
		t.Errorf("Resolve of a missing image = %v; want ErrNotFound naming it", err)
	}
}
