package images

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ExportConfig describes the container image Export writes around a root
// filesystem.
type ExportConfig struct {
	// Ref names the image: the docker archive's tag and the layout's
	// org.opencontainers.image.ref.name, e.g. "corralhq/corral:dev".
	Ref string
	// Epoch is every timestamp in the image: each entry's modification
	// time and the config's creation time (SOURCE_DATE_EPOCH).
	Epoch int64
	// Config is the image's run configuration: entrypoint, environment,
	// ports, volumes, labels.
	Config v1.Config
	// CreatedBy is the history entry's description of the layer.
	CreatedBy string
	// Empty are directories kept in the image without their contents
	// (relative paths such as "dev" or "proc": a runtime mounts over them).
	Empty []string
}

// Exported is what Export wrote.
type Exported struct {
	// Digest is the image manifest's digest, the same in the layout and
	// the docker archive: the image's identity.
	Digest string
	// LayerBytes is the compressed layer's size, what a registry stores
	// and a node pulls; TarBytes is the layer unpacked.
	LayerBytes, TarBytes int64
}

// Export writes rootfs as a single-layer OCI image, reproducibly: the same
// tree and config give the same digest on any machine with the same Go
// release (gzip's output is Go's). Entries are in lexical order with
// numeric owners and no owner names, every timestamp is cfg.Epoch, and
// neither extended attributes nor device nodes, sockets or FIFOs are kept.
// It writes an OCI image layout directory at layoutDir (replaced) and,
// unless dockerTar is empty, a `docker load` archive (which `corral image
// import` reads too). scratch holds the layer while it is written.
func Export(ctx context.Context, rootfs string, cfg ExportConfig, scratch, layoutDir, dockerTar string) (Exported, error) {
	ref, err := name.NewTag(cfg.Ref)
	if err != nil {
		return Exported{}, fmt.Errorf("image ref %q: %w", cfg.Ref, err)
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return Exported{}, err
	}
	layerPath := filepath.Join(scratch, "layer.tar.gz")
	tarBytes, err := writeLayer(ctx, rootfs, layerPath, cfg)
	if err != nil {
		return Exported{}, fmt.Errorf("export %s: %w", rootfs, err)
	}
	defer os.Remove(layerPath)
	layer, err := tarball.LayerFromFile(layerPath, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return Exported{}, fmt.Errorf("export %s: %w", rootfs, err)
	}
	created := v1.Time{Time: time.Unix(cfg.Epoch, 0).UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: created, CreatedBy: cfg.CreatedBy}})
	if err != nil {
		return Exported{}, fmt.Errorf("export %s: %w", rootfs, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Exported{}, fmt.Errorf("export %s: %w", rootfs, err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = goruntime.GOARCH, "linux"
	cf.Created = created
	cf.Config = cfg.Config
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return Exported{}, fmt.Errorf("export %s: %w", rootfs, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Exported{}, fmt.Errorf("export %s: %w", rootfs, err)
	}
	if err := os.RemoveAll(layoutDir); err != nil {
		return Exported{}, err
	}
	p, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return Exported{}, fmt.Errorf("write OCI layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref.String()})); err != nil {
		return Exported{}, fmt.Errorf("write OCI layout: %w", err)
	}
	if dockerTar != "" {
		if err := tarball.WriteToFile(dockerTar, ref, img); err != nil {
			return Exported{}, fmt.Errorf("write docker archive: %w", err)
		}
	}
	size, err := layer.Size()
	if err != nil {
		return Exported{}, err
	}
	return Exported{Digest: digest.String(), LayerBytes: size, TarBytes: tarBytes}, nil
}

// writeLayer writes rootfs as a gzipped tar at dst and returns the tar's
// size.
func writeLayer(ctx context.Context, rootfs, dst string, cfg ExportConfig) (int64, error) {
	f, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	// The gzip header carries no name and no time; the level is fixed.
	zw, err := gzip.NewWriterLevel(bw, gzip.DefaultCompression)
	if err != nil {
		return 0, err
	}
	cw := &countingWriter{w: zw}
	tw := tar.NewWriter(cw)
	if err := writeTree(ctx, tw, rootfs, cfg); err != nil {
		return 0, err
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	return cw.n, f.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeTree adds every entry under rootfs to tw in lexical order (WalkDir's),
// never following a link; hard links become link entries to the first path
// seen.
func writeTree(ctx context.Context, tw *tar.Writer, rootfs string, cfg ExportConfig) error {
	mtime := time.Unix(cfg.Epoch, 0).UTC()
	empty := map[string]bool{}
	for _, e := range cfg.Empty {
		empty[filepath.Clean(e)] = true
	}
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	return filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(rootfs, p)
		if err != nil || rel == "." {
			return err
		}
		if dir := filepath.Dir(rel); empty[dir] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		hdr := &tar.Header{
			Name:    filepath.ToSlash(rel),
			Mode:    int64(st.Mode & 0o7777),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case mode&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case mode.IsRegular():
			key := inode{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				break
			}
			links[key] = hdr.Name
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		default:
			// Device nodes, sockets and FIFOs: a runtime makes what a
			// container needs.
			return nil
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		n, err := io.Copy(tw, src)
		if err == nil && n != hdr.Size {
			err = errors.New("changed while it was read")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
}
