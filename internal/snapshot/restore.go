package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/corralhq/corral/internal/blob"
)

// Restore writes the files of snapshot id into dir, which must not exist,
// and returns the snapshot's manifest. Holes stay holes (the files are
// sparse); every chunk is checked against its SHA-256, and a missing or
// corrupt one is ErrCorrupt naming the file and offset. The files are
// written into a temporary directory beside dir, renamed to dir once all
// are complete and synced: dir either does not exist or holds the whole
// snapshot.
func (s *Store) Restore(ctx context.Context, id, dir string) (*Manifest, error) {
	m, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("restore snapshot %s into %s: %w", id, dir, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	parent := filepath.Dir(dir)
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".partial-")
	if err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	if err := s.restoreInto(ctx, m, tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	if err := syncDir(parent); err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	return m, nil
}

// restoreInto writes m's files under dir: each file is created at its
// size (all hole), then Parallel goroutines fetch, check and write the
// chunks holding data at their offsets.
func (s *Store) restoreInto(ctx context.Context, m *Manifest, dir string) (err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fds := make([]*os.File, len(m.Files))
	defer func() {
		for _, fd := range fds {
			if fd != nil {
				if cerr := fd.Close(); err == nil && cerr != nil {
					err = cerr
				}
			}
		}
	}()
	type job struct{ file, index int }
	var jobs []job
	for i, f := range m.Files {
		if d := filepath.Dir(filepath.FromSlash(f.Name)); d != "." {
			if err := root.MkdirAll(d, 0o700); err != nil {
				return err
			}
		}
		fd, err := root.OpenFile(filepath.FromSlash(f.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		fds[i] = fd
		if err := fd.Truncate(f.Size); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		for c, h := range f.Chunks {
			if h != "" {
				jobs = append(jobs, job{i, c})
			}
		}
	}

	g, ctx := errgroup.WithContext(ctx)
	next := make(chan job)
	g.Go(func() error {
		defer close(next)
		for _, j := range jobs {
			select {
			case next <- j:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	})
	for range s.parallel {
		g.Go(func() error {
			var stored, data []byte
			for j := range next {
				f := m.Files[j.file]
				off := int64(j.index) * m.ChunkSize
				n := min(m.ChunkSize, f.Size-off)
				var err error
				stored, data, err = s.fetch(ctx, f.Chunks[j.index], n, stored, data)
				if err != nil {
					return fmt.Errorf("file %s at offset %d: %w", f.Name, off, err)
				}
				if err := writeSparse(fds[j.file], data, off); err != nil {
					return fmt.Errorf("file %s: %w", f.Name, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, f := range m.Files {
		if err := fds[i].Chmod(f.Mode); err != nil {
			return fmt.Errorf("file %s: %w", f.Name, err)
		}
		if err := fds[i].Sync(); err != nil {
			return fmt.Errorf("file %s: %w", f.Name, err)
		}
	}
	return nil
}

// fetch reads chunk h, which holds n bytes, through the buffers stored and
// data, and returns them.
func (s *Store) fetch(ctx context.Context, h string, n int64, stored, data []byte) ([]byte, []byte, error) {
	key := s.chunkKey(h)
	rc, _, err := s.blobs.Get(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return stored, data, fmt.Errorf("chunk %s missing: %w: %w", h, ErrCorrupt, err)
	}
	if err != nil {
		return stored, data, fmt.Errorf("chunk %s: %w", h, err)
	}
	stored, err = readAll(rc, stored[:0], maxChunkStored)
	rc.Close()
	if err != nil {
		return stored, data, fmt.Errorf("chunk %s: %w", h, err)
	}
	data, err = s.dec.DecodeAll(stored, data[:0])
	if err != nil {
		return stored, data, fmt.Errorf("chunk %s: %w: %v", h, ErrCorrupt, err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != n || hex.EncodeToString(sum[:]) != h {
		return stored, data, fmt.Errorf("chunk %s: content (%d bytes) does not match its hash: %w", h, len(data), ErrCorrupt)
	}
	return stored, data, nil
}

// readAll appends r to buf, refusing more than limit bytes.
func readAll(r io.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return buf, fmt.Errorf("larger than %d bytes: %w", limit, ErrCorrupt)
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// page is the granularity at which Restore leaves zeros inside a chunk
// unwritten: a file system block.
const page = 4096

// writeSparse writes data at off, skipping the pages of zeros in it, so
// that a chunk holding a little data and many zeros (an ext4 image's
// block group) allocates only the blocks the source file had.
func writeSparse(fd *os.File, data []byte, off int64) error {
	start := -1 // of the run of pages with data being gathered
	for p := 0; p < len(data); p += page {
		zero := allZero(data[p:min(p+page, len(data))])
		switch {
		case !zero && start < 0:
			start = p
		case zero && start >= 0:
			if _, err := fd.WriteAt(data[start:p], off+int64(start)); err != nil {
				return err
			}
			start = -1
		}
	}
	if start >= 0 {
		if _, err := fd.WriteAt(data[start:], off+int64(start)); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
