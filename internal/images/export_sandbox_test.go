package images_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/testenv"
)

// The docker archive is one `corral image import` reads.
func TestExportImports(t *testing.T) {
	testenv.RequireRoot(t)
	root := exportTree(t, time.Now())
	out := t.TempDir()
	cfg := images.ExportConfig{Ref: "corral.test/export:2", Epoch: 1735689600, Config: v1.Config{Env: []string{"PATH=/usr/bin", "FOO=bar"}}}
	if _, err := images.Export(t.Context(), root, cfg, filepath.Join(out, "scratch"), filepath.Join(out, "oci"), filepath.Join(out, "docker.tar")); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, t.TempDir(), 0)
	info, err := s.Import(t.Context(), filepath.Join(out, "docker.tar"), images.ImportOptions{Name: "exported"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Origin != "corral.test/export:2" {
		t.Errorf("origin %q", info.Origin)
	}
	if b, err := os.ReadFile(filepath.Join(info.Rootfs, "usr/bin/tool2")); err != nil || string(b) != "#!/bin/sh\necho tool\n" {
		t.Errorf("hard-linked file: %q, %v", b, err)
	}
	// Unpacked as a runtime would, without the sandbox layout.
	dir := filepath.Join(t.TempDir(), "rootfs")
	cf, err := images.Unpack(t.Context(), filepath.Join(out, "oci"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg.Config.Env, cf.Config.Env); diff != "" {
		t.Errorf("unpacked config env (-want +got):\n%s", diff)
	}
	if target, err := os.Readlink(filepath.Join(dir, "bin")); err != nil || target != "usr/bin" {
		t.Errorf("bin -> %q, %v", target, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/passwd")); err == nil {
		t.Error("Unpack applied the sandbox layout")
	}
}
