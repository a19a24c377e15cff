package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// ErrUnsafeArchive is an archive with an entry that would reach outside the
// image's root: a "../" or absolute path, or a link that escapes.
var ErrUnsafeArchive = errors.New("unsafe archive")

// ErrTooLarge is an image that does not fit in the image budget.
var ErrTooLarge = errors.New("image too large")

// OCI whiteouts: ".wh.NAME" deletes NAME from lower layers; ".wh..wh..opq"
// empties its directory of lower layers' files.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// extractStats counts what a layer held.
type extractStats struct {
	Entries, Skipped int
	Bytes            int64
}

// applyLayer extracts one layer's tar stream over r, honouring whiteouts. It
// refuses any entry whose path or link target escapes the root, writes
// nothing outside it whatever links earlier entries made, applies no
// extended attributes, and creates no device nodes. *budget is how many
// bytes of file content may still be written.
func applyLayer(r *root, rd io.Reader, budget *int64) (extractStats, error) {
	var st extractStats
	tr := tar.NewReader(rd)
	// Paths this layer made, with their parents: an opaque whiteout spares
	// them.
	created := map[string]bool{}
	mark := func(p string) {
		for ; p != "." && p != "" && !created[p]; p = path.Dir(p) {
			created[p] = true
		}
	}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("read layer: %w", err)
		}
		st.Entries++
		p, err := cleanEntry(hdr.Name)
		if err != nil {
			return st, fmt.Errorf("%w: entry %q: %v", ErrUnsafeArchive, hdr.Name, err)
		}
		if p == "" {
			continue // the root itself: Corral sets its mode
		}
		dir, base := path.Dir(p), path.Base(p)
		if base == whiteoutOpaque {
			if err := opaque(r, dir, created); err != nil {
				return st, fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
			continue
		}
		if victim, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
			target := path.Join(dir, victim)
			if victim == "" || victim == "." || victim == ".." {
				return st, fmt.Errorf("%w: entry %q: bad whiteout", ErrUnsafeArchive, hdr.Name)
			}
			if !created[target] {
				if err := r.RemoveAll(target); err != nil {
					return st, fmt.Errorf("entry %q: %w", hdr.Name, err)
				}
			}
			continue
		}
		mode := uint32(hdr.Mode) & 0o7777
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = r.Mkdir(p, mode, hdr.Uid, hdr.Gid)
		case tar.TypeReg:
			if *budget -= hdr.Size; *budget < 0 {
				return st, fmt.Errorf("%w: more file content than the image budget allows", ErrTooLarge)
			}
			st.Bytes += hdr.Size
			err = writeEntry(r, p, tr, hdr)
		case tar.TypeSymlink:
			if lerr := checkLinkTarget(p, hdr.Linkname); lerr != nil {
				return st, fmt.Errorf("%w: symlink %q: %v", ErrUnsafeArchive, hdr.Name, lerr)
			}
			err = r.Symlink(hdr.Linkname, p, hdr.Uid, hdr.Gid)
		case tar.TypeLink:
			old, lerr := cleanEntry(hdr.Linkname)
			if lerr == nil && old == "" {
				lerr = errors.New("links to the root")
			}
			if lerr != nil {
				return st, fmt.Errorf("%w: hard link %q to %q: %v", ErrUnsafeArchive, hdr.Name, hdr.Linkname, lerr)
			}
			err = r.Link(old, p)
		default:
			// Devices, FIFOs and the like: a sandbox's /dev is its own, and
			// nothing else needs them.
			st.Skipped++
			continue
		}
		if err != nil {
			return st, fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		mark(p)
	}
}

func writeEntry(r *root, p string, src io.Reader, hdr *tar.Header) error {
	f, err := r.Create(p)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, src)
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = f.Chown(hdr.Uid, hdr.Gid)
	}
	if err == nil {
		err = f.Chmod(os.FileMode(uint32(hdr.Mode) & 0o777))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// opaque empties dir of everything this layer did not create.
func opaque(r *root, dir string, created map[string]bool) error {
	entries, err := r.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		if !created[p] {
			if err := r.RemoveAll(p); err != nil {
				return err
			}
		}
	}
	return nil
}
