package fleet_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
)

// tinyArchive writes a one-file image as `docker save` would.
func tinyArchive(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o644, Size: 2}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tw, "hi")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tiny.tar")
	ref, err := name.ParseReference("corral.test/tiny:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHoldsTheStoresImage: over the real image store, a sandbox's image is
// in use while it lives and not after; a removal meanwhile waits for it.
// Importing an image needs root (its files are chowned).
func TestHoldsTheStoresImage(t *testing.T) {
	testenv.RequireRoot(t)
	store := images.New(images.Config{Dir: t.TempDir(), UID: 65534, GID: 65534})
	if _, err := store.Import(t.Context(), tinyArchive(t), images.ImportOptions{Name: "tiny"}); err != nil {
		t.Fatal(err)
	}
	img, err := store.Resolve("tiny")
	if err != nil {
		t.Fatal(err)
	}
	inUse := func() bool {
		t.Helper()
		l, err := store.List()
		if err != nil || len(l) != 1 {
			t.Fatalf("List = %+v, %v", l, err)
		}
		return l[0].InUse
	}
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	f := fleet.New(fleet.Config{}, []runtime.Runtime{u.rts[runtime.TierContainer]}, store, nil)
	defer f.Close()

	a, err := f.Create(t.Context(), runtime.TierContainer, runtime.Spec{}, img, fleet.HolderExecution)
	if err != nil {
		t.Fatal(err)
	}
	if !inUse() {
		t.Error("the image of a live sandbox is not in use")
	}
	f.Destroy(a)
	if inUse() {
		t.Error("the image is in use after its sandbox was destroyed")
	}

	b, err := f.Create(t.Context(), runtime.TierContainer, runtime.Spec{}, img, fleet.HolderExecution)
	if err != nil {
		t.Fatal(err)
	}
	if deferred, err := store.Remove("tiny"); err != nil || !deferred {
		t.Fatalf("Remove under a live sandbox = %v, %v; want deferred", deferred, err)
	}
	if _, err := os.Stat(filepath.Join(img.Rootfs, "hello")); err != nil {
		t.Errorf("the files of an image in use were removed: %v", err)
	}
	answers(t, b)
	f.Destroy(b)
}
