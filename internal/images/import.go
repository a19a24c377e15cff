package images

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImportOptions control an import.
type ImportOptions struct {
	// Name is the image's name; empty derives it from the file name.
	Name string
	// Progress is told what the import is doing, from 0 to 1.
	Progress func(stage string, fraction float64)
}

// ErrArchive is a file that is not a docker save or OCI layout tarball.
var ErrArchive = errors.New("not an image archive")

// NameFromFile derives an image name from an archive's file name:
// "python-3.12.tar.gz" → "python-3.12".
func NameFromFile(file string) string {
	base := strings.ToLower(filepath.Base(file))
	for _, ext := range []string{".tar.gz", ".tgz", ".tar", ".oci"} {
		base = strings.TrimSuffix(base, ext)
	}
	var b strings.Builder
	for _, c := range base {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-._")
}

// Import unpacks a `docker save` tarball or an OCI image layout tarball
// (either may be gzipped) into an image. Layers are applied in order with
// whiteouts honoured; an entry with a "../" or absolute path, or a link
// escaping the root, refuses the whole import (ErrUnsafeArchive) and
// nothing is installed. Content beyond the budget is refused too. Import
// needs root.
func (s *Store) Import(ctx context.Context, file string, opts ImportOptions) (Info, error) {
	name := opts.Name
	if name == "" {
		name = NameFromFile(file)
	}
	if err := CheckName(name); err != nil {
		return Info{}, err
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string, float64) {}
	}
	unlock, err := s.buildLock(ctx, name)
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	st, err := s.newStage()
	if err != nil {
		return Info{}, err
	}
	defer st.discard()

	progress("reading the archive", 0.01)
	img, origin, err := openArchive(file, filepath.Join(st.dir, "layout"), s.cfg.Budget)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", file, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return Info{}, fmt.Errorf("import %s: read layers: %w", file, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return Info{}, fmt.Errorf("import %s: read image config: %w", file, err)
	}
	rootfs := filepath.Join(st.dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return Info{}, fmt.Errorf("import %s: %w", file, err)
	}
	r, err := openRoot(rootfs)
	if err != nil {
		return Info{}, err
	}
	defer r.Close()
	budget := s.cfg.Budget
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return Info{}, err
		}
		progress(fmt.Sprintf("applying layer %d/%d", i+1, len(layers)), 0.05+0.80*float64(i)/float64(len(layers)))
		if err := applyLayerFrom(r, l, &budget); err != nil {
			return Info{}, fmt.Errorf("import %s: layer %d: %w", file, i+1, err)
		}
	}
	os.RemoveAll(filepath.Join(st.dir, "layout"))
	m, err := s.finish(st, importEnv(cfg), progress)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", file, err)
	}
	progress("installing the image", 0.98)
	info, err := s.install(st, m, record{Name: name, Source: "import", Origin: origin})
	if err != nil {
		return info, fmt.Errorf("import %s: %w", file, err)
	}
	progress("done", 1)
	return info, nil
}

func applyLayerFrom(r *root, l v1.Layer, budget *int64) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = applyLayer(r, rc, budget)
	return err
}

// importEnv keeps an image's configured environment (PATH, LANG, ...)
// except what the sandbox itself sets.
func importEnv(cfg *v1.ConfigFile) []string {
	var env []string
	for _, kv := range cfg.Config.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !envRE.MatchString(k) || reservedImageEnv[k] || strings.HasPrefix(k, "CORRAL_") {
			continue
		}
		env = append(env, kv)
	}
	slices.Sort(env)
	return env
}

// opener opens the archive, decompressing a gzipped one.
func opener(file string) tarball.Opener {
	return func() (io.ReadCloser, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		br := bufio.NewReader(f)
		if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
			zr, err := gzip.NewReader(br)
			if err != nil {
				f.Close()
				return nil, err
			}
			return struct {
				io.Reader
				io.Closer
			}{zr, f}, nil
		}
		return struct {
			io.Reader
			io.Closer
		}{br, f}, nil
	}
}

// openArchive recognises a docker save tarball (manifest.json) or an OCI
// layout (index.json and oci-layout), which it unpacks into scratch (blobs
// only: regular files under checked names) for go-containerregistry to
// read. origin names the image: its tag if the archive has one, else the
// file's name.
func openArchive(file, scratch string, budget int64) (v1.Image, string, error) {
	open := opener(file)
	rc, err := open()
	if err != nil {
		return nil, "", err
	}
	var hasManifest, hasIndex bool
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			rc.Close()
			return nil, "", fmt.Errorf("%w: %v", ErrArchive, err)
		}
		switch strings.TrimPrefix(hdr.Name, "./") {
		case "manifest.json":
			hasManifest = true
		case "index.json":
			hasIndex = true
		}
	}
	rc.Close()
	origin := filepath.Base(file)
	switch {
	case hasManifest:
		if m, err := tarball.LoadManifest(open); err == nil && len(m) == 1 && len(m[0].RepoTags) > 0 {
			origin = m[0].RepoTags[0]
		}
		img, err := tarball.Image(open, nil)
		if err != nil {
			return nil, "", fmt.Errorf("read docker archive: %w", err)
		}
		return img, origin, nil
	case hasIndex:
		if err := unpackLayout(open, scratch, budget); err != nil {
			return nil, "", err
		}
		idx, err := layout.ImageIndexFromPath(scratch)
		if err != nil {
			return nil, "", fmt.Errorf("read OCI layout: %w", err)
		}
		img, ref, err := pickImage(idx)
		if err != nil {
			return nil, "", err
		}
		if ref != "" {
			origin = ref
		}
		return img, origin, nil
	}
	return nil, "", fmt.Errorf("%w: no manifest.json (docker save) or index.json (OCI layout) in it", ErrArchive)
}

// unpackLayout writes an OCI layout's files under dir. A layout holds only
// regular files and directories; anything else, or an unsafe name, refuses
// the archive.
func unpackLayout(open tarball.Opener, dir string, budget int64) error {
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	r, err := openRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrArchive, err)
		}
		p, err := cleanEntry(hdr.Name)
		if err != nil {
			return fmt.Errorf("%w: entry %q: %v", ErrUnsafeArchive, hdr.Name, err)
		}
		switch {
		case p == "":
		case hdr.Typeflag == tar.TypeDir:
			if err := r.Mkdir(p, 0o700, 0, 0); err != nil {
				return err
			}
		case hdr.Typeflag == tar.TypeReg:
			if budget -= hdr.Size; budget < 0 {
				return fmt.Errorf("%w: the archive holds more than the image budget", ErrTooLarge)
			}
			f, err := r.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("unpack %s: %w", p, err)
			}
		default:
			return fmt.Errorf("%w: entry %q: an OCI layout holds only files and directories", ErrUnsafeArchive, hdr.Name)
		}
	}
}

// pickImage finds the image in an index: the only one, or the one for this
// machine's platform; nested indexes are followed.
func pickImage(idx v1.ImageIndex) (v1.Image, string, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", fmt.Errorf("read OCI index: %w", err)
	}
	var images []v1.Descriptor
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsImage():
			images = append(images, d)
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, "", fmt.Errorf("read OCI index %s: %w", d.Digest, err)
			}
			img, ref, err := pickImage(child)
			if ref == "" {
				ref = d.Annotations["org.opencontainers.image.ref.name"]
			}
			return img, ref, err
		}
	}
	pick := -1
	if len(images) == 1 {
		pick = 0
	}
	for i, d := range images {
		if pick < 0 && d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == goruntime.GOARCH {
			pick = i
		}
	}
	if pick < 0 {
		return nil, "", fmt.Errorf("%w: the OCI layout has %d images and none for linux/%s; export one image", ErrArchive, len(images), goruntime.GOARCH)
	}
	img, err := idx.Image(images[pick].Digest)
	if err != nil {
		return nil, "", fmt.Errorf("read OCI image: %w", err)
	}
	return img, images[pick].Annotations["org.opencontainers.image.ref.name"], nil
}

// Unpack applies the layers of an image, from an OCI image layout
// directory or a docker save or OCI layout archive, into dir as a container
// runtime would before running it: whiteouts honoured, nothing written
// outside dir, no device nodes, no setuid bits. Unlike Import it applies
// no sandbox layout and stores nothing; it returns the image's config (its
// entrypoint, environment). Corral's own image is run this way by its
// container test (test/container). Unpack needs root to keep owners.
func Unpack(ctx context.Context, src, dir string) (*v1.ConfigFile, error) {
	var img v1.Image
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		idx, err := layout.ImageIndexFromPath(src)
		if err != nil {
			return nil, fmt.Errorf("read OCI layout %s: %w", src, err)
		}
		if img, _, err = pickImage(idx); err != nil {
			return nil, err
		}
	} else {
		scratch, err := os.MkdirTemp(filepath.Dir(dir), ".unpack-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(scratch)
		if img, _, err = openArchive(src, scratch, math.MaxInt64); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", src, err)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("unpack %s: read image config: %w", src, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("unpack %s: read layers: %w", src, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r, err := openRoot(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	budget := int64(math.MaxInt64)
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := applyLayerFrom(r, l, &budget); err != nil {
			return nil, fmt.Errorf("unpack %s: layer %d: %w", src, i+1, err)
		}
	}
	return cfg, nil
}
