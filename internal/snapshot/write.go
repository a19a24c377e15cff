package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/blob"
)

// Write stores the regular files under dir (subdirectories included) as
// snapshot id, or as a new id when id is "", and returns its manifest.
// The files must not change while Write reads them. A symlink, device or
// other special file under dir is ErrInvalid; an id in use is ErrExists.
// Chunks already stored are not uploaded again; at most Parallel chunks
// are read, compressed and uploaded at once. On failure no manifest is
// written (chunks already uploaded stay for GC).
func (s *Store) Write(ctx context.Context, id string, meta Meta, dir string) (*Manifest, error) {
	if id == "" {
		id = newID()
	}
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if meta.Parent != "" {
		if err := ValidID(meta.Parent); err != nil {
			return nil, fmt.Errorf("snapshot %s: parent: %w", id, err)
		}
	}
	paths, files, err := scan(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if _, err := s.blobs.Stat(ctx, s.manifestKey(id)); err == nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrExists)
	} else if !errors.Is(err, blob.ErrNotFound) {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	// Each Write has a marker of its own: two Writes of one id that get
	// past the check below do not end each other's exclusion of GC.
	body, _ := json.Marshal(map[string]string{"id": id})
	l, err := s.take(ctx, s.writeKey(id)+newID(), body)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: announce write: %w", id, err)
	}
	defer l.release(ctx)
	others, _, err := s.live(ctx, writesDir+id+"/", l.start)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	for _, o := range others {
		if o.Key != l.key {
			return nil, fmt.Errorf("snapshot %s: being written: %w", id, ErrExists)
		}
	}
	if err := s.waitGC(ctx, l); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}

	m := &Manifest{Version: FormatVersion, ID: id, Created: time.Now().UTC().Round(time.Millisecond),
		ChunkSize: ChunkSize, Meta: meta, Files: files}
	if err := s.upload(ctx, m, paths); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	// Past this check no GC can have run since the chunks were found.
	if err := l.held(); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if _, err := s.blobs.Put(ctx, s.manifestKey(id), bytes.NewReader(data), int64(len(data)), jsonType); err != nil {
		return nil, fmt.Errorf("snapshot %s: write manifest: %w", id, err)
	}
	return m, nil
}

// waitGC returns once no GC marker is live, the Write's own marker being
// written: a GC starting later sees it and does nothing.
func (s *Store) waitGC(ctx context.Context, l *lease) error {
	for {
		// The store's time now, to within a renewal.
		self, err := s.blobs.Stat(ctx, l.key)
		if err != nil {
			return fmt.Errorf("wait for GC: %w", err)
		}
		live, _, err := s.live(ctx, gcDir, self.ModTime)
		if err != nil {
			return fmt.Errorf("wait for GC: %w", err)
		}
		if len(live) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for GC: %w", context.Cause(ctx))
		case <-time.After(min(s.lease/8, time.Second)):
		}
	}
}

// scan lists the regular files under dir, sorted by name, with their
// paths.
func scan(dir string) ([]string, []File, error) {
	var paths []string
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: %v is not a regular file: %w", name, d.Type(), ErrInvalid)
		}
		if err := ValidName(name); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		paths = append(paths, p)
		files = append(files, File{Name: name, Size: info.Size(), Mode: info.Mode().Perm(),
			Chunks: make([]string, (info.Size()+ChunkSize-1)/ChunkSize)})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	return paths, files, nil
}

// chunkJob is a chunk read from a file, waiting for its upload.
type chunkJob struct {
	file, index int
	buf         *[]byte
}

// upload fills m's chunk lists and stats, uploading the chunks not stored
// yet: one goroutine reads the files in order, skipping holes, and
// Parallel goroutines hash, compress and upload.
func (s *Store) upload(ctx context.Context, m *Manifest, paths []string) error {
	g, ctx := errgroup.WithContext(ctx)
	jobs := make(chan chunkJob)
	// The buffers in flight: read, queued and being uploaded.
	bufs := make(chan *[]byte, s.parallel+1)
	for range cap(bufs) {
		b := make([]byte, ChunkSize)
		bufs <- &b
	}
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		stats = Stats{}
	)
	for _, f := range m.Files {
		stats.LogicalBytes += f.Size
	}
	g.Go(func() error {
		defer close(jobs)
		for i, p := range paths {
			holes, err := s.readFile(ctx, p, &m.Files[i], i, bufs, jobs)
			if err != nil {
				return fmt.Errorf("read %s: %w", m.Files[i].Name, err)
			}
			mu.Lock()
			stats.Holes += holes
			mu.Unlock()
		}
		return nil
	})
	for range s.parallel {
		g.Go(func() error {
			var out []byte
			for j := range jobs {
				data := *j.buf
				sum := sha256.Sum256(data)
				h := hex.EncodeToString(sum[:])
				f := &m.Files[j.file]
				f.Chunks[j.index] = h // each index has one writer; Wait orders it
				mu.Lock()
				dup := seen[h]
				seen[h] = true
				stats.Chunks++
				mu.Unlock()
				if dup {
					mu.Lock()
					stats.ReusedChunks++
					mu.Unlock()
					bufs <- j.buf
					continue
				}
				key := s.chunkKey(h)
				_, err := s.blobs.Stat(ctx, key)
				if err == nil {
					mu.Lock()
					stats.ReusedChunks++
					mu.Unlock()
					bufs <- j.buf
					continue
				}
				if !errors.Is(err, blob.ErrNotFound) {
					return fmt.Errorf("%s at offset %d: %w", f.Name, int64(j.index)*ChunkSize, err)
				}
				out = s.enc.EncodeAll(data, out[:0])
				bufs <- j.buf
				if _, err := s.blobs.Put(ctx, key, bytes.NewReader(out), int64(len(out)), chunkType); err != nil {
					return fmt.Errorf("%s at offset %d: %w", f.Name, int64(j.index)*ChunkSize, err)
				}
				mu.Lock()
				stats.NewChunks++
				stats.NewBytes += int64(len(out))
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	m.Stats = stats
	return nil
}

// readFile sends the chunks of the file at p that hold data to jobs and
// returns how many are holes. Ranges the file system reports as holes
// (SEEK_DATA) are not read; chunks read as zeros are holes too.
func (s *Store) readFile(ctx context.Context, p string, f *File, fi int, bufs chan *[]byte, jobs chan<- chunkJob) (int, error) {
	fd, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() != f.Size {
		return 0, fmt.Errorf("size changed from %d to %d while snapshotting", f.Size, st.Size())
	}
	holes := 0
	// nextData is where the next data starts at or after the chunk being
	// considered; -1 when unknown (no SEEK_DATA), f.Size when none.
	nextData := seekData(fd, 0, f.Size)
	for i := range f.Chunks {
		off := int64(i) * ChunkSize
		n := min(ChunkSize, f.Size-off)
		if nextData >= 0 && nextData < off {
			nextData = seekData(fd, off, f.Size)
		}
		if nextData >= off+n {
			holes++
			continue
		}
		var buf *[]byte
		select {
		case buf = <-bufs:
		case <-ctx.Done():
			return holes, context.Cause(ctx)
		}
		data := (*buf)[:n]
		if _, err := fd.ReadAt(data, off); err != nil {
			bufs <- buf
			if errors.Is(err, io.EOF) {
				return holes, fmt.Errorf("file shrank while snapshotting: %w", err)
			}
			return holes, err
		}
		if allZero(data) {
			bufs <- buf
			holes++
			continue
		}
		*buf = data
		select {
		case jobs <- chunkJob{file: fi, index: i, buf: buf}:
		case <-ctx.Done():
			return holes, context.Cause(ctx)
		}
	}
	return holes, nil
}

// seekData returns the offset of the first data at or after off, size if
// there is none, or -1 if the file system cannot tell (every chunk is
// then read).
func seekData(fd *os.File, off, size int64) int64 {
	d, err := unix.Seek(int(fd.Fd()), off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return size
	case err != nil:
		return -1
	}
	return d
}

var zeros [64 << 10]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
