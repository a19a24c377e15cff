// Package snapshot stores snapshots of live sandboxes — a sandbox's disk
// image and, on gVisor, its checkpoint files — in a blob.Store, so that a
// sandbox can be resumed by a node other than the one that paused it. It
// is the storage layer under internal/live's pauses that any node resumes,
// drains that move sandboxes, and clients' snapshots and forks.
//
// # Format
//
// Each file of a snapshot is cut into fixed, aligned chunks of ChunkSize
// bytes (the last may be shorter). A chunk is named by the SHA-256 of its
// uncompressed bytes, compressed with zstd and stored once under
// "snapshots/chunks/<first two hex digits>/<hex>", shared by every
// snapshot that holds it: a second snapshot of the same sandbox uploads
// only the chunks that changed. A chunk of zeros is not stored at all: the
// manifest records it as a hole, Write finds holes with SEEK_DATA without
// reading them, and Restore leaves them as holes (sparse files).
//
// Fixed chunks suit what is stored: an ext4 disk image changes in place,
// so a 1 MiB write changes one or two aligned 4 MiB chunks and nothing
// around them moves; content-defined chunking, which finds shifted data
// again, buys nothing for a block image and costs a rolling hash over
// every byte. 4 MiB keeps a manifest small (256 entries per GiB) and
// requests few, while a small change still costs little. zstd at its
// fastest level compresses a chunk at hundreds of MB/s per core.
//
// A snapshot is a versioned JSON manifest under "snapshots/manifests/<id>"
// naming its files, their sizes, modes and chunks, the sandbox's
// description (Meta) and what writing it cost (Stats). The manifest is
// written last: a snapshot exists once all its chunks do.
//
// # Garbage collection
//
// Delete removes a manifest only; GC removes the chunks no manifest
// names. A Write and a GC never overlap, which is what makes it safe for
// a Write to reuse a chunk it finds present: each announces itself with a
// marker object ("snapshots/writes/<id>/<random>",
// "snapshots/gc/<random>") that it renews every Lease/4 and removes when
// done, and looks for the other kind after writing its own, so of two
// that start together at least one sees the other. A GC that sees a live
// Write marker (renewed within Lease, by the store's clock) returns
// ErrBusy and deletes nothing (a long sweep checks again every second and
// yields the same way); a Write that sees a live GC marker waits for it to
// end. Each side stops (a Write before writing its manifest, a GC before
// its next deletion) once it has failed to renew its marker for Lease/2,
// before the other side could take it for dead. A GC also keeps
// unreferenced chunks younger than Lease, and removes the markers of
// Writes that died.
package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/sandbox"
)

// Errors. Functions wrap them, so test with errors.Is.
var (
	// ErrNotFound: no snapshot with that id.
	ErrNotFound = errors.New("snapshot not found")
	// ErrInvalidID: an id that is not 1 to MaxIDLen letters, digits,
	// '.', '_' or '-' starting with a letter or digit.
	ErrInvalidID = errors.New("invalid snapshot id")
	// ErrInvalid: a manifest, file or option the package refuses (a file
	// name with "..", an absolute one, a chunk list of the wrong length,
	// a special file in the directory to snapshot).
	ErrInvalid = errors.New("invalid snapshot")
	// ErrExists: Write was given the id of a snapshot that exists or is
	// being written.
	ErrExists = errors.New("snapshot already exists")
	// ErrCorrupt: a chunk is missing, or its content does not match its
	// hash; the message names the file and offset.
	ErrCorrupt = errors.New("snapshot data corrupt")
	// ErrBusy: GC found a Write in progress and stopped, before removing
	// anything or, in a long sweep, partway; run it again later.
	ErrBusy = errors.New("snapshot write in progress")
	// ErrLeaseLost: a Write or GC could not renew its marker in time, so
	// the other side may have taken it for dead; the Write wrote no
	// manifest, the GC stopped deleting.
	ErrLeaseLost = errors.New("snapshot marker not renewed in time")
)

const (
	// ChunkSize is the size of a chunk (see the package comment).
	ChunkSize = 4 << 20
	// FormatVersion is the manifest's version; Get refuses others.
	FormatVersion = 1
	// MaxIDLen is the longest snapshot id.
	MaxIDLen = 128
	// DefaultLease is the Lease of Options left zero.
	DefaultLease = time.Minute
	// MinLease is the shortest Lease: marker times are kept to the second
	// by S3.
	MinLease = 2 * time.Second
	// DefaultParallel is the Parallel of Options left zero.
	DefaultParallel = 4
	// maxManifest bounds what Get reads of a manifest (64 MiB holds a
	// manifest of several TiB of files).
	maxManifest = 64 << 20
	// maxChunkStored bounds what Restore reads of a compressed chunk:
	// zstd never grows incompressible data by more than a few bytes per
	// block.
	maxChunkStored = ChunkSize + ChunkSize/8
)

const (
	chunksDir    = "snapshots/chunks/"
	manifestsDir = "snapshots/manifests/"
	writesDir    = "snapshots/writes/"
	gcDir        = "snapshots/gc/"
	chunkType    = "application/zstd"
	jsonType     = "application/json"
)

// Meta describes the sandbox a snapshot was taken of; the package stores
// it and does not read it.
type Meta struct {
	Image     string                `json:"image,omitempty"`
	Tier      string                `json:"tier,omitempty"`
	Limits    sandbox.SandboxLimits `json:"limits"`
	Contexts  []sandbox.CodeContext `json:"contexts,omitempty"`
	Processes []sandbox.ProcessInfo `json:"processes,omitempty"`
	// Parent is the id of the snapshot this one was taken after, if any.
	Parent string `json:"parent,omitempty"`
	// Extra holds what the caller needs and the fields above do not say.
	Extra map[string]string `json:"extra,omitempty"`
}

// Manifest is a stored snapshot.
type Manifest struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	Created   time.Time `json:"created"`
	ChunkSize int64     `json:"chunk_size"`
	Meta      Meta      `json:"meta"`
	Files     []File    `json:"files"`
	Stats     Stats     `json:"stats"`
}

// File is one file of a snapshot.
type File struct {
	// Name is slash-separated and relative to the snapshot's directory
	// (see ValidName).
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Mode holds permission bits only.
	Mode fs.FileMode `json:"mode"`
	// Chunks holds the hex SHA-256 of each chunk of the file in order,
	// or "" for a hole (a chunk of zeros, not stored).
	Chunks []string `json:"chunks"`
}

// Stats say what a Write stored.
type Stats struct {
	// LogicalBytes is the sum of the files' sizes.
	LogicalBytes int64 `json:"logical_bytes"`
	// Chunks counts the chunks holding data; Holes the chunks of zeros.
	Chunks int `json:"chunks"`
	Holes  int `json:"holes"`
	// NewChunks were uploaded by this Write, NewBytes their compressed
	// size; ReusedChunks were already stored (by an earlier snapshot or
	// earlier in this one).
	NewChunks    int   `json:"new_chunks"`
	NewBytes     int64 `json:"new_bytes"`
	ReusedChunks int   `json:"reused_chunks"`
}

// Options configure a Store; the zero value is the default.
type Options struct {
	// Prefix is put before every key ("" or ending with "/"), e.g. a
	// deployment's or tenant's directory.
	Prefix string
	// Lease is how long a Write's or GC's marker counts as live after it
	// was last renewed, and how old an unreferenced chunk must be for GC
	// to remove it. Every node sharing a store must use the same Lease.
	Lease time.Duration
	// Parallel bounds the chunks a Write or Restore handles at once
	// (each holds up to two chunks in memory).
	Parallel int
}

// Store reads and writes snapshots in a blob.Store. Its methods are safe
// for concurrent use.
type Store struct {
	blobs    blob.Store
	prefix   string
	lease    time.Duration
	parallel int
	enc      *zstd.Encoder
	dec      *zstd.Decoder
}

// New returns a Store keeping snapshots in blobs, which the caller still
// owns and closes after the Store.
func New(blobs blob.Store, o Options) (*Store, error) {
	if o.Prefix != "" && (!strings.HasSuffix(o.Prefix, "/") || blob.ValidatePrefix(o.Prefix) != nil) {
		return nil, fmt.Errorf("snapshot key prefix %q: want a key prefix ending with /: %w", o.Prefix, ErrInvalid)
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < MinLease {
		return nil, fmt.Errorf("snapshot lease %v: want at least %v: %w", o.Lease, MinLease, ErrInvalid)
	}
	if o.Parallel == 0 {
		o.Parallel = DefaultParallel
	}
	if o.Parallel < 1 {
		return nil, fmt.Errorf("snapshot parallelism %d: %w", o.Parallel, ErrInvalid)
	}
	// EncodeAll and DecodeAll are safe for concurrent use; a concurrency
	// of 1 keeps them from starting goroutines of their own.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(2*ChunkSize))
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &Store{blobs: blobs, prefix: o.Prefix, lease: o.Lease, parallel: o.Parallel, enc: enc, dec: dec}, nil
}

// Close releases the Store's compressors; it does not close the blob
// store.
func (s *Store) Close() error {
	s.dec.Close()
	return s.enc.Close()
}

func (s *Store) chunkKey(h string) string     { return s.prefix + chunksDir + h[:2] + "/" + h }
func (s *Store) manifestKey(id string) string { return s.prefix + manifestsDir + id }
func (s *Store) writeKey(id string) string    { return s.prefix + writesDir + id + "/" }

// ValidID returns nil for an id Write accepts, ErrInvalidID otherwise.
func ValidID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("snapshot id %.*q: want 1 to %d characters: %w", MaxIDLen, id, MaxIDLen, ErrInvalidID)
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return fmt.Errorf("snapshot id %q: want letters, digits, '.', '_' or '-', starting with a letter or digit: %w", id, ErrInvalidID)
		}
	}
	return nil
}

// newID returns a fresh snapshot id.
func newID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "snap-" + hex.EncodeToString(b)
}

// ValidName returns nil for a file name a manifest may hold: relative,
// slash-separated, without empty, "." or ".." elements or control
// characters, each element at most 255 bytes.
func ValidName(name string) error {
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("file name %q: want a relative path without . or .. elements: %w", name, ErrInvalid)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("file name %q: control character: %w", name, ErrInvalid)
		}
	}
	for el := range strings.SplitSeq(name, "/") {
		if len(el) > 255 {
			return fmt.Errorf("file name %q: element longer than 255 bytes: %w", name, ErrInvalid)
		}
	}
	return nil
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range []byte(h) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Validate returns nil for a manifest Restore can follow, ErrInvalid (or
// ErrInvalidID) naming the first fault otherwise.
func (m *Manifest) Validate() error {
	if m.Version != FormatVersion {
		return fmt.Errorf("manifest version %d, want %d: %w", m.Version, FormatVersion, ErrInvalid)
	}
	if err := ValidID(m.ID); err != nil {
		return err
	}
	if m.Meta.Parent != "" {
		if err := ValidID(m.Meta.Parent); err != nil {
			return fmt.Errorf("parent: %w", err)
		}
	}
	if m.ChunkSize < 64<<10 || m.ChunkSize > ChunkSize {
		return fmt.Errorf("chunk size %d: %w", m.ChunkSize, ErrInvalid)
	}
	names := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if err := ValidName(f.Name); err != nil {
			return err
		}
		if names[f.Name] {
			return fmt.Errorf("file %q twice: %w", f.Name, ErrInvalid)
		}
		names[f.Name] = true
		if f.Size < 0 || f.Mode&^fs.ModePerm != 0 {
			return fmt.Errorf("file %q: size %d, mode %v: %w", f.Name, f.Size, f.Mode, ErrInvalid)
		}
		if want := (f.Size + m.ChunkSize - 1) / m.ChunkSize; int64(len(f.Chunks)) != want {
			return fmt.Errorf("file %q: %d chunks for %d bytes, want %d: %w", f.Name, len(f.Chunks), f.Size, want, ErrInvalid)
		}
		for i, h := range f.Chunks {
			if h != "" && !validHash(h) {
				return fmt.Errorf("file %q: chunk %d: %q is not a SHA-256: %w", f.Name, i, h, ErrInvalid)
			}
		}
	}
	// A file cannot also be a directory of others ("a" and "a/b").
	for name := range names {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if names[dir] {
				return fmt.Errorf("file %q is inside file %q: %w", name, dir, ErrInvalid)
			}
		}
	}
	return nil
}

// Get returns the manifest of snapshot id.
func (s *Store) Get(ctx context.Context, id string) (*Manifest, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	rc, _, err := s.blobs.Get(ctx, s.manifestKey(id))
	if errors.Is(err, blob.ErrNotFound) {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: read manifest: %w", id, err)
	}
	if len(data) > maxManifest {
		return nil, fmt.Errorf("snapshot %s: manifest larger than %d bytes: %w", id, maxManifest, ErrInvalid)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("snapshot %s: manifest: %v: %w", id, err, ErrInvalid)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("snapshot %s: manifest: %w", id, err)
	}
	if m.ID != id {
		return nil, fmt.Errorf("snapshot %s: manifest names snapshot %s: %w", id, m.ID, ErrInvalid)
	}
	return &m, nil
}

// List returns the manifests of every snapshot, sorted by id. It reads
// each manifest (callers filter on Meta), and fails on one it cannot
// read.
func (s *Store) List(ctx context.Context) ([]*Manifest, error) {
	objs, err := s.blobs.List(ctx, s.prefix+manifestsDir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := make([]*Manifest, 0, len(objs))
	for _, o := range objs {
		m, err := s.Get(ctx, strings.TrimPrefix(o.Key, s.prefix+manifestsDir))
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Delete removes snapshot id. Its chunks stay until GC finds no other
// snapshot holds them.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	key := s.manifestKey(id)
	if _, err := s.blobs.Stat(ctx, key); errors.Is(err, blob.ErrNotFound) {
		return fmt.Errorf("delete snapshot %s: %w", id, ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := s.blobs.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}

// lease is a marker object a Write or GC keeps renewed while it runs.
type lease struct {
	s    *Store
	key  string
	body []byte
	// start is the store's time when the marker was first written.
	start time.Time
	stop  context.CancelFunc
	done  chan struct{}

	mu sync.Mutex
	// renewed is when the marker was last written (by the local clock,
	// with its monotonic reading).
	renewed time.Time
	// lost is set once two writes of the marker were more than Lease/2
	// apart: others may have taken it for dead in between.
	lost bool
}

// take writes the marker under key and keeps it renewed until release.
func (s *Store) take(ctx context.Context, key string, body []byte) (*lease, error) {
	t0 := time.Now()
	obj, err := s.blobs.Put(ctx, key, bytes.NewReader(body), int64(len(body)), jsonType)
	if err != nil {
		return nil, err
	}
	// The time Put returns may be an estimate; Stat's is the store's.
	if o, err := s.blobs.Stat(ctx, key); err == nil {
		obj = o
	}
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l := &lease{s: s, key: key, body: body, start: obj.ModTime, stop: stop, done: make(chan struct{}), renewed: t0}
	go l.renew(hctx)
	return l, nil
}

func (l *lease) renew(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.s.lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t0 := time.Now()
		pctx, cancel := context.WithTimeout(ctx, l.s.lease/4)
		_, err := l.s.blobs.Put(pctx, l.key, bytes.NewReader(l.body), int64(len(l.body)), jsonType)
		cancel()
		if err == nil {
			l.mu.Lock()
			if t0.Sub(l.renewed) > l.s.lease/2 {
				l.lost = true
			}
			l.renewed = t0
			l.mu.Unlock()
		}
	}
}

// held reports whether no other node can have taken the marker for dead.
func (l *lease) held() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return fmt.Errorf("%s went unrenewed for more than %v: %w", l.key, l.s.lease/2, ErrLeaseLost)
	}
	if since := time.Since(l.renewed); since > l.s.lease/2 {
		return fmt.Errorf("%s last renewed %v ago: %w", l.key, since.Round(time.Millisecond), ErrLeaseLost)
	}
	return nil
}

// release stops renewing the marker and removes it. A marker left behind
// (the store failing now) only delays GC or Writes by one Lease.
func (l *lease) release(ctx context.Context) {
	l.stop()
	<-l.done
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.s.lease)
	defer cancel()
	l.s.blobs.Delete(dctx, l.key)
}

// live returns the objects under dir renewed within the lease before
// now (the store's time).
func (s *Store) live(ctx context.Context, dir string, now time.Time) (live, dead []blob.Object, err error) {
	objs, err := s.blobs.List(ctx, s.prefix+dir)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range objs {
		if o.ModTime.After(now.Add(-s.lease)) {
			live = append(live, o)
		} else {
			dead = append(dead, o)
		}
	}
	return live, dead, nil
}
