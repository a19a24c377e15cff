package images_test

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/corralhq/corral/internal/images"
)

// exportTree writes a small root filesystem whose timestamps depend on
// when it was made.
func exportTree(t *testing.T, stamp time.Time) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range []struct{ path, body string }{
		{"usr/bin/tool", "#!/bin/sh\necho tool\n"},
		{"etc/app.conf", "x = 1\n"},
		{"dev/null-ish", "a runtime mounts /dev: its contents are left out\n"},
	} {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))
	must(filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, stamp, stamp)
	}))
	return root
}

func TestExportIsReproducible(t *testing.T) {
	cfg := images.ExportConfig{
		Ref: "corral.test/export:1", Epoch: 1735689600, CreatedBy: "test", Empty: []string{"dev"},
		Config: v1.Config{Entrypoint: []string{"/usr/bin/tool"}, Env: []string{"PATH=/usr/bin:/bin"}},
	}
	var digests []string
	var layouts []string
	for i, stamp := range []time.Time{time.Unix(1, 0), time.Now()} {
		root := exportTree(t, stamp)
		out := t.TempDir()
		layoutDir := filepath.Join(out, "oci")
		got, err := images.Export(t.Context(), root, cfg, filepath.Join(out, "scratch"), layoutDir, filepath.Join(out, "docker.tar"))
		if err != nil {
			t.Fatalf("export %d: %v", i, err)
		}
		digests = append(digests, got.Digest)
		layouts = append(layouts, layoutDir)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two exports of the same tree differ: %s, %s", digests[0], digests[1])
	}

	idx, err := layout.ImageIndexFromPath(layouts[0])
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != digests[0] ||
		im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "corral.test/export:1" {
		t.Fatalf("layout index: %+v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cf.Created.Equal(time.Unix(cfg.Epoch, 0)) || cf.Config.Entrypoint[0] != "/usr/bin/tool" {
		t.Errorf("config: created %v, entrypoint %v", cf.Created, cf.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var entries []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(cfg.Epoch, 0)) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v, owner names %q %q", h.Name, h.ModTime, h.Uname, h.Gname)
		}
		e := string(h.Typeflag) + " " + h.Name
		if h.Linkname != "" {
			e += " -> " + h.Linkname
		}
		entries = append(entries, e)
	}
	want := []string{"2 bin -> usr/bin", "5 dev/", "5 etc/", "0 etc/app.conf", "5 usr/", "5 usr/bin/",
		"0 usr/bin/tool", "1 usr/bin/tool2 -> usr/bin/tool"}
	if diff := cmp.Diff(want, entries); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}
