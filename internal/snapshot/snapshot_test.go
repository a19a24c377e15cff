package snapshot_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/blobtest"
	"github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/blob/s3"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) { blobtest.Main(m, testenv.StopS3) }

const MiB = 1 << 20

// testLease is short, so that GC tests need not wait long for chunks to
// age, and long enough that a loaded machine renews markers in time.
const testLease = 3 * time.Second

type opener func(t testing.TB) blob.Store

func openLocal(t testing.TB) blob.Store {
	s, err := local.New(t.TempDir(), "http://127.0.0.1:1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openS3(t testing.TB) blob.Store {
	s, err := s3.Open(t.Context(), testenv.S3(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var backends = []struct {
	name string
	open opener
}{{"local", openLocal}, {"s3", openS3}}

func newStore(t testing.TB, b blob.Store) *snapshot.Store {
	s, err := snapshot.New(b, snapshot.Options{Lease: testLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSnapshot runs every case against a local store and a real
// S3-compatible server, each case on an empty store of its own. The cases
// run in parallel: most of their time is spent waiting for leases to age,
// and a store of their own keeps one case's GC from another's chunks.
func TestSnapshot(t *testing.T) {
	cases := []struct {
		name string
		run  func(*testing.T, blob.Store)
	}{
		{"RoundTripSparse", testRoundTripSparse},
		{"Incremental", testIncremental},
		{"Dedup", testDedup},
		{"DeleteGC", testDeleteGC},
		{"Corrupt", testCorrupt},
		{"BadManifest", testBadManifest},
		{"Refused", testRefused},
		{"WriteWaitsForGC", testWriteWaitsForGC},
		{"ConcurrentWriteGC", testConcurrentWriteGC},
		{"Prefix", testPrefix},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, b.open(t))
				})
			}
		})
	}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// writeSparse creates a sparse file of size at p holding data at the
// offsets given, which must not overlap.
func writeSparse(t testing.TB, p string, size int64, data map[int64][]byte, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, b := range data {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Chmod(mode); err != nil {
		t.Fatal(err)
	}
}

// allocated is the space a file occupies on disk.
func allocated(t testing.TB, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// sameTree fails t unless the regular files under a and b are the same
// (names, contents, permissions).
func sameTree(t testing.TB, a, b string) {
	t.Helper()
	read := func(dir string) map[string]string {
		out := map[string]string{}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = info.Mode().String() + " " + string(data)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ta, tb := read(a), read(b)
	if len(ta) != len(tb) {
		t.Fatalf("%s has %d files, %s has %d", a, len(ta), b, len(tb))
	}
	for name, va := range ta {
		vb, ok := tb[name]
		if !ok {
			t.Fatalf("%s missing from %s", name, b)
		}
		if va != vb {
			t.Fatalf("%s differs (mode %s vs %s, %d vs %d bytes)", name, va[:10], vb[:10], len(va), len(vb))
		}
	}
}

// storedChunks returns the hashes of the chunks in b.
func storedChunks(t testing.TB, b blob.Store) map[string]bool {
	t.Helper()
	objs, err := b.List(t.Context(), "snapshots/chunks/")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, o := range objs {
		out[filepath.Base(o.Key)] = true
	}
	return out
}

func chunksOf(m *snapshot.Manifest) map[string]bool {
	out := map[string]bool{}
	for _, f := range m.Files {
		for _, h := range f.Chunks {
			if h != "" {
				out[h] = true
			}
		}
	}
	return out
}

func write(t testing.TB, s *snapshot.Store, id string, meta snapshot.Meta, dir string) *snapshot.Manifest {
	t.Helper()
	m, err := s.Write(t.Context(), id, meta, dir)
	if err != nil {
		t.Fatalf("write %s: %v", id, err)
	}
	return m
}

func restore(t testing.TB, s *snapshot.Store, id string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "restored")
	if _, err := s.Restore(t.Context(), id, out); err != nil {
		t.Fatalf("restore %s: %v", id, err)
	}
	return out
}

func testRoundTripSparse(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	src := t.TempDir()
	// Data in chunks 0, 1 (across the boundary with 0), 5 and 15 of 16.
	writeSparse(t, filepath.Join(src, "disk.img"), 64*MiB, map[int64][]byte{
		0:             randomBytes(1, 4096),
		4*MiB - 2048:  randomBytes(2, 4096),
		20*MiB + 123:  randomBytes(3, 100<<10),
		64*MiB - 1000: randomBytes(4, 1000),
	}, 0o640)
	if err := os.MkdirAll(filepath.Join(src, "checkpoint"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "checkpoint", "pages.img"), randomBytes(5, 3*MiB/2), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "checkpoint", "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Zeros written out, not a hole: stored as holes all the same.
	if err := os.WriteFile(filepath.Join(src, "zeros.img"), make([]byte, 8*MiB+5), 0o600); err != nil {
		t.Fatal(err)
	}
	meta := snapshot.Meta{Image: "python", Tier: "gvisor",
		Limits:    sandbox.SandboxLimits{MemoryMB: 512, DiskMB: 1024},
		Contexts:  []sandbox.CodeContext{{ID: "c1", Language: "python", Cwd: "/workspace"}},
		Processes: []sandbox.ProcessInfo{{PID: 7, Cmd: []string{"sleep", "1000"}, Cwd: "/", Running: true}},
		Extra:     map[string]string{"node": "n1"}}
	m := write(t, s, "sbx-1.snap_1", meta, src)

	want := snapshot.Stats{LogicalBytes: 64*MiB + 3*MiB/2 + 8*MiB + 5, Chunks: 5, Holes: 12 + 3, NewChunks: 5, NewBytes: m.Stats.NewBytes}
	if diff := cmp.Diff(want, m.Stats); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if m.Stats.NewBytes < 3*MiB/2 || m.Stats.NewBytes > 2*MiB {
		t.Errorf("new bytes %d: want about the 1.6 MiB of random data", m.Stats.NewBytes)
	}
	if got := len(storedChunks(t, b)); got != 5 {
		t.Errorf("%d chunks stored, want 5", got)
	}
	got, err := s.Get(t.Context(), m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got); diff != "" {
		t.Errorf("Get (-written +got):\n%s", diff)
	}
	list, err := s.List(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != m.ID {
		t.Errorf("List: %v %v", list, err)
	}

	out := restore(t, s, m.ID)
	sameTree(t, src, out)
	srcBlocks, outBlocks := allocated(t, filepath.Join(src, "disk.img")), allocated(t, filepath.Join(out, "disk.img"))
	t.Logf("disk.img: 64 MiB, %d KiB allocated in the source, %d KiB restored", srcBlocks>>10, outBlocks>>10)
	if outBlocks > srcBlocks+64<<10 || outBlocks > MiB {
		t.Errorf("restored disk.img allocates %d bytes, the source %d: holes were filled", outBlocks, srcBlocks)
	}
	if n := allocated(t, filepath.Join(out, "zeros.img")); n != 0 {
		t.Errorf("restored zeros.img allocates %d bytes, want 0 (a hole)", n)
	}
	// Nothing beside the restored directory: the temporary one was renamed.
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 1 {
		t.Errorf("restore left %v", entries)
	}
	if _, err := s.Restore(t.Context(), m.ID, out); !errors.Is(err, fs.ErrExist) {
		t.Errorf("restore onto an existing directory: %v, want fs.ErrExist", err)
	}
}

func testIncremental(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	v1, v2 := t.TempDir(), t.TempDir()
	base := randomBytes(10, 24*MiB)
	writeSparse(t, filepath.Join(v1, "disk.img"), 64*MiB, map[int64][]byte{0: base}, 0o600)
	m1 := write(t, s, "s1", snapshot.Meta{}, v1)
	if m1.Stats.NewChunks != 6 || m1.Stats.Holes != 10 {
		t.Fatalf("first snapshot stats %+v, want 6 new chunks and 10 holes", m1.Stats)
	}
	// 1 MiB changed across the boundary of chunks 2 and 3.
	changed := bytes.Clone(base)
	copy(changed[11*MiB+MiB/2:], randomBytes(11, MiB))
	writeSparse(t, filepath.Join(v2, "disk.img"), 64*MiB, map[int64][]byte{0: changed}, 0o600)
	m2 := write(t, s, "s2", snapshot.Meta{Parent: "s1"}, v2)
	t.Logf("second snapshot after a 1 MiB change: %+v", m2.Stats)
	if m2.Stats.NewChunks != 2 || m2.Stats.ReusedChunks != 4 {
		t.Errorf("second snapshot stats %+v, want 2 new chunks and 4 reused", m2.Stats)
	}
	if m2.Stats.NewBytes > 2*snapshot.ChunkSize+4096 {
		t.Errorf("second snapshot added %d bytes, more than its two chunks", m2.Stats.NewBytes)
	}
	if got := len(storedChunks(t, b)); got != 8 {
		t.Errorf("%d chunks stored, want 8", got)
	}
	sameTree(t, v1, restore(t, s, "s1"))
	sameTree(t, v2, restore(t, s, "s2"))
}

func testDedup(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	a, c := t.TempDir(), t.TempDir()
	data := randomBytes(20, 10*MiB)
	if err := os.WriteFile(filepath.Join(a, "one"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The same content under another name, and one chunk three times.
	if err := os.WriteFile(filepath.Join(c, "two"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	block := randomBytes(21, snapshot.ChunkSize)
	if err := os.WriteFile(filepath.Join(c, "three"), bytes.Repeat(block, 3), 0o600); err != nil {
		t.Fatal(err)
	}
	ma := write(t, s, "a", snapshot.Meta{}, a)
	mc := write(t, s, "c", snapshot.Meta{}, c)
	if ma.Stats.NewChunks != 3 {
		t.Errorf("first snapshot: %+v, want 3 new chunks", ma.Stats)
	}
	if mc.Stats.NewChunks != 1 || mc.Stats.ReusedChunks != 5 {
		t.Errorf("second snapshot: %+v, want 1 new chunk, 5 reused (3 from the first, 2 within)", mc.Stats)
	}
	if got := len(storedChunks(t, b)); got != 4 {
		t.Errorf("%d chunks stored, want 4", got)
	}
	sameTree(t, c, restore(t, s, "c"))
}

func testDeleteGC(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	a, c := t.TempDir(), t.TempDir()
	shared := randomBytes(30, snapshot.ChunkSize)
	if err := os.WriteFile(filepath.Join(a, "f"), append(append([]byte{}, shared...), randomBytes(31, 2*snapshot.ChunkSize)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c, "f"), append(append([]byte{}, shared...), randomBytes(32, MiB)...), 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, s, "a", snapshot.Meta{}, a)
	mc := write(t, s, "c", snapshot.Meta{}, c)
	if err := s.Delete(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		s.Delete(t.Context(), "a"),
		func() error { _, err := s.Get(t.Context(), "a"); return err }(),
		func() error { _, err := s.Restore(t.Context(), "a", filepath.Join(t.TempDir(), "x")); return err }(),
	} {
		if !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("a deleted snapshot: %v, want ErrNotFound", err)
		}
	}
	st, err := s.GC(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 0 || st.Young != 2 || st.Chunks != 4 || st.Manifests != 1 {
		t.Errorf("GC of young chunks: %+v, want 4 chunks, 2 unreferenced kept as young, none deleted", st)
	}
	time.Sleep(testLease + time.Second)
	st, err = s.GC(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 2 || st.Young != 0 {
		t.Errorf("GC: %+v, want the 2 chunks only a held deleted", st)
	}
	if diff := cmp.Diff(chunksOf(mc), storedChunks(t, b)); diff != "" {
		t.Errorf("chunks left (-c's +stored):\n%s", diff)
	}
	sameTree(t, c, restore(t, s, "c"))
}

func testCorrupt(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "pages.img"), randomBytes(40, 3*snapshot.ChunkSize), 0o600); err != nil {
		t.Fatal(err)
	}
	m := write(t, s, "x", snapshot.Meta{}, src)
	h := m.Files[0].Chunks[1]
	key := "snapshots/chunks/" + h[:2] + "/" + h
	enc, _ := zstd.NewWriter(nil)
	other := enc.EncodeAll(randomBytes(41, snapshot.ChunkSize), nil)
	enc.Close()
	for _, tc := range []struct {
		name   string
		stored []byte // nil: the chunk is deleted
	}{
		{"other content", other},
		{"not zstd", []byte("garbage")},
		{"missing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stored == nil {
				if err := b.Delete(t.Context(), key); err != nil {
					t.Fatal(err)
				}
			} else if _, err := b.Put(t.Context(), key, bytes.NewReader(tc.stored), int64(len(tc.stored)), ""); err != nil {
				t.Fatal(err)
			}
			parent := t.TempDir()
			out := filepath.Join(parent, "out")
			_, err := s.Restore(t.Context(), "x", out)
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("restore: %v, want ErrCorrupt", err)
			}
			if tc.stored == nil && !errors.Is(err, blob.ErrNotFound) {
				t.Errorf("restore: %v, want it to wrap blob.ErrNotFound too", err)
			}
			for _, part := range []string{"pages.img", "offset 4194304", h} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not name %q", err, part)
				}
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("a failed restore left %v", entries)
			}
		})
	}
}

func testBadManifest(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	for name, body := range map[string]string{
		"dotdot":   `{"version":1,"id":"bad","chunk_size":4194304,"files":[{"name":"../etc/passwd","size":1,"mode":384,"chunks":["` + strings.Repeat("a", 64) + `"]}]}`,
		"absolute": `{"version":1,"id":"bad","chunk_size":4194304,"files":[{"name":"/etc/passwd","size":0,"mode":384,"chunks":[]}]}`,
		"version":  `{"version":9,"id":"bad","chunk_size":4194304,"files":[]}`,
		"other id": `{"version":1,"id":"good","chunk_size":4194304,"files":[]}`,
		"not json": `{`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := b.Put(t.Context(), "snapshots/manifests/bad", strings.NewReader(body), -1, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(t.Context(), "bad"); !errors.Is(err, snapshot.ErrInvalid) {
				t.Errorf("Get: %v, want ErrInvalid", err)
			}
			parent := t.TempDir()
			if _, err := s.Restore(t.Context(), "bad", filepath.Join(parent, "out")); !errors.Is(err, snapshot.ErrInvalid) {
				t.Errorf("Restore: %v, want ErrInvalid", err)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("a refused restore wrote %v", entries)
			}
			// GC cannot know what an unreadable snapshot holds.
			if _, err := s.GC(t.Context()); !errors.Is(err, snapshot.ErrInvalid) {
				t.Errorf("GC: %v, want ErrInvalid", err)
			}
		})
	}
}

func testRefused(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../x", "a/b", ".hidden", "-x", strings.Repeat("a", 129), "a b"} {
		if _, err := s.Write(t.Context(), id, snapshot.Meta{}, src); !errors.Is(err, snapshot.ErrInvalidID) {
			t.Errorf("Write(%q): %v, want ErrInvalidID", id, err)
		}
	}
	if _, err := s.Write(t.Context(), "p", snapshot.Meta{Parent: "../x"}, src); !errors.Is(err, snapshot.ErrInvalidID) {
		t.Errorf("Write with parent ../x: %v, want ErrInvalidID", err)
	}
	m := write(t, s, "", snapshot.Meta{}, src)
	if snapshot.ValidID(m.ID) != nil {
		t.Errorf("generated id %q is invalid", m.ID)
	}
	if _, err := s.Write(t.Context(), m.ID, snapshot.Meta{}, src); !errors.Is(err, snapshot.ErrExists) {
		t.Errorf("Write of an existing id: %v, want ErrExists", err)
	}
	// The same id being written elsewhere.
	if _, err := b.Put(t.Context(), "snapshots/writes/dup/other", strings.NewReader("{}"), 2, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(t.Context(), "dup", snapshot.Meta{}, src); !errors.Is(err, snapshot.ErrExists) {
		t.Errorf("Write of an id being written: %v, want ErrExists", err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(t.Context(), "link", snapshot.Meta{}, src); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("Write of a directory with a symlink: %v, want ErrInvalid", err)
	}
	if _, err := s.Get(t.Context(), "link"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("a refused Write left a snapshot: %v", err)
	}
}

// testWriteWaitsForGC: a Write that finds a GC running waits for it to
// end; a GC that finds a Write running removes nothing.
func testWriteWaitsForGC(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), randomBytes(50, MiB), 0o600); err != nil {
		t.Fatal(err)
	}
	// An unreferenced chunk old enough to be removed.
	write(t, s, "old", snapshot.Meta{}, src)
	if err := s.Delete(t.Context(), "old"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testLease + time.Second)

	marker := func(key string) {
		if _, err := b.Put(t.Context(), key, strings.NewReader("{}"), 2, ""); err != nil {
			t.Fatal(err)
		}
	}
	// A Write in progress elsewhere: GC removes nothing.
	marker("snapshots/writes/elsewhere")
	if _, err := s.GC(t.Context()); !errors.Is(err, snapshot.ErrBusy) {
		t.Errorf("GC during a write: %v, want ErrBusy", err)
	}
	if n := len(storedChunks(t, b)); n != 1 {
		t.Errorf("GC during a write left %d chunks, want 1", n)
	}
	if err := b.Delete(t.Context(), "snapshots/writes/elsewhere"); err != nil {
		t.Fatal(err)
	}

	// A GC in progress elsewhere: the Write waits until it ends.
	marker("snapshots/gc/elsewhere")
	done := make(chan error, 1)
	go func() {
		_, err := s.Write(t.Context(), "new", snapshot.Meta{}, src)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Write ended (%v) while a GC was live", err)
	case <-time.After(time.Second):
	}
	if err := b.Delete(t.Context(), "snapshots/gc/elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, restore(t, s, "new"))

	// A marker not renewed for a Lease is a dead process's: GC removes it.
	marker("snapshots/writes/dead")
	time.Sleep(testLease + time.Second)
	st, err := s.GC(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadWrites != 1 {
		t.Errorf("GC: %+v, want 1 dead write marker removed", st)
	}
}

// testConcurrentWriteGC: while snapshots are written that begin with the
// content of a deleted, old snapshot (chunks GC would remove were it not
// for the Writes' markers) and go on with new data that takes a while to
// upload, a GC runs; every snapshot restores whole afterwards.
func testConcurrentWriteGC(t *testing.T, b blob.Store) {
	s := newStore(t, b)
	// One chunk at a time, so that the Write is still uploading when the
	// GC starts.
	slow, err := snapshot.New(b, snapshot.Options{Lease: testLease, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	old := randomBytes(60, 12*MiB)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, s, "old", snapshot.Meta{}, src)
	if err := s.Delete(t.Context(), "old"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testLease + time.Second)

	for i := range 3 {
		id := "new" + string(rune('0'+i))
		dir := t.TempDir()
		data := append(append([]byte{}, old...), randomBytes(uint64(61+i), 40*MiB)...)
		if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		stored := storedChunks(t, b)
		done := make(chan error, 1)
		go func() {
			m, err := slow.Write(t.Context(), id, snapshot.Meta{}, dir)
			if err == nil {
				t.Logf("%s: %+v", id, m.Stats)
			}
			done <- err
		}()
		// Once the Write has found the old chunks (the first of its file)
		// and uploads new ones.
	wait:
		for {
			for h := range storedChunks(t, b) {
				if !stored[h] {
					break wait
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		st, err := s.GC(t.Context())
		if !errors.Is(err, snapshot.ErrBusy) {
			t.Errorf("GC during write %s: %+v %v, want ErrBusy", id, st, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		sameTree(t, dir, restore(t, s, id))
	}
}

func TestValidate(t *testing.T) {
	h := strings.Repeat("ab", 32)
	ok := func() snapshot.Manifest {
		return snapshot.Manifest{Version: 1, ID: "s", ChunkSize: snapshot.ChunkSize, Files: []snapshot.File{
			{Name: "disk.img", Size: snapshot.ChunkSize + 1, Mode: 0o600, Chunks: []string{h, ""}},
			{Name: "checkpoint/pages.img", Size: 0, Mode: 0o644, Chunks: []string{}},
		}}
	}
	m := ok()
	if err := m.Validate(); err != nil {
		t.Fatalf("a valid manifest: %v", err)
	}
	for name, change := range map[string]func(*snapshot.Manifest){
		"dotdot":         func(m *snapshot.Manifest) { m.Files[0].Name = "../disk.img" },
		"inner dotdot":   func(m *snapshot.Manifest) { m.Files[0].Name = "a/../disk.img" },
		"absolute":       func(m *snapshot.Manifest) { m.Files[0].Name = "/disk.img" },
		"empty name":     func(m *snapshot.Manifest) { m.Files[0].Name = "" },
		"dot":            func(m *snapshot.Manifest) { m.Files[0].Name = "." },
		"double slash":   func(m *snapshot.Manifest) { m.Files[0].Name = "a//b" },
		"trailing slash": func(m *snapshot.Manifest) { m.Files[0].Name = "a/" },
		"control":        func(m *snapshot.Manifest) { m.Files[0].Name = "a\nb" },
		"twice":          func(m *snapshot.Manifest) { m.Files[1].Name = "disk.img" },
		"file in file":   func(m *snapshot.Manifest) { m.Files[1].Name = "disk.img/x" },
		"chunk count":    func(m *snapshot.Manifest) { m.Files[0].Chunks = []string{h} },
		"bad hash":       func(m *snapshot.Manifest) { m.Files[0].Chunks[0] = "../../x" },
		"upper hash":     func(m *snapshot.Manifest) { m.Files[0].Chunks[0] = strings.ToUpper(h) },
		"negative size":  func(m *snapshot.Manifest) { m.Files[1].Size = -1 },
		"setuid":         func(m *snapshot.Manifest) { m.Files[0].Mode |= fs.ModeSetuid },
		"version":        func(m *snapshot.Manifest) { m.Version = 2 },
		"chunk size":     func(m *snapshot.Manifest) { m.ChunkSize = 1 },
		"id":             func(m *snapshot.Manifest) { m.ID = "a/b" },
		"parent":         func(m *snapshot.Manifest) { m.Meta.Parent = ".." },
	} {
		m := ok()
		change(&m)
		err := m.Validate()
		if !errors.Is(err, snapshot.ErrInvalid) && !errors.Is(err, snapshot.ErrInvalidID) {
			t.Errorf("%s: %v, want ErrInvalid or ErrInvalidID", name, err)
		}
	}
}

// testPrefix: stores with different key prefixes share a blob store
// without seeing each other's snapshots or chunks.
func testPrefix(t *testing.T, b blob.Store) {
	open := func(prefix string) *snapshot.Store {
		s, err := snapshot.New(b, snapshot.Options{Prefix: prefix, Lease: testLease})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	x, y := open("tenant-x/"), open("tenant-y/")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), randomBytes(70, MiB), 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, x, "s", snapshot.Meta{}, src)
	my := write(t, y, "s", snapshot.Meta{}, src)
	if my.Stats.NewChunks != 1 {
		t.Errorf("a store under another prefix reused a chunk: %+v", my.Stats)
	}
	if err := x.Delete(t.Context(), "s"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testLease + time.Second)
	if st, err := x.GC(t.Context()); err != nil || st.Deleted != 1 {
		t.Errorf("GC of x: %+v %v, want its one chunk deleted", st, err)
	}
	sameTree(t, src, restore(t, y, "s"))
	if _, err := snapshot.New(b, snapshot.Options{Prefix: "no-slash"}); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("prefix without a slash: %v, want ErrInvalid", err)
	}
}

// FuzzManifest: whatever a store holds as a manifest, one that Validate
// accepts names only files inside the restore directory.
func FuzzManifest(f *testing.F) {
	f.Add(`{"version":1,"id":"s","chunk_size":4194304,"files":[{"name":"disk.img","size":5,"mode":384,"chunks":["` + strings.Repeat("a", 64) + `"]}]}`)
	f.Add(`{"version":1,"id":"s","chunk_size":4194304,"files":[{"name":"../x","size":0,"mode":384,"chunks":[]}]}`)
	f.Add(`{"version":1,"id":"s","chunk_size":65536,"files":[{"name":"a/b","size":70000,"mode":420,"chunks":["",""]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var m snapshot.Manifest
		if json.Unmarshal([]byte(body), &m) != nil || m.Validate() != nil {
			return
		}
		for _, file := range m.Files {
			clean := filepath.Clean(filepath.FromSlash(file.Name))
			if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || clean != filepath.FromSlash(file.Name) {
				t.Fatalf("Validate accepted file name %q", file.Name)
			}
			if int64(len(file.Chunks))*m.ChunkSize < file.Size {
				t.Fatalf("Validate accepted %d chunks for %d bytes", len(file.Chunks), file.Size)
			}
		}
	})
}
