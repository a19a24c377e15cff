// Package blobtest is the conformance suite of blob.Store: every
// implementation's tests run it, so they all keep the same promises.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/corralhq/corral/internal/blob"
)

// Opener returns an empty Store for t, closed when t ends.
type Opener func(t *testing.T) blob.Store

// patience bounds every wait for something that must happen.
const patience = 30 * time.Second

// Run checks that the Stores open returns keep every promise of
// blob.Store. Checks run one after another: LargePutMemory measures the
// heap of the whole process.
func Run(t *testing.T, open func(t *testing.T) blob.Store) {
	tests := []struct {
		name string
		run  func(*testing.T, blob.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"UnknownSize", testUnknownSize},
		{"SizeMismatch", testSizeMismatch},
		{"ContentType", testContentType},
		{"Overwrite", testOverwrite},
		{"NotFound", testNotFound},
		{"List", testList},
		{"DeletePrefix", testDeletePrefix},
		{"Keys", testKeys},
		{"InvalidKeys", testInvalidKeys},
		{"Conflict", testConflict},
		{"ConcurrentPuts", testConcurrentPuts},
		{"CancelledPut", testCancelledPut},
		{"ReaderError", testReaderError},
		{"LargePutMemory", testLargePutMemory},
		{"SignedURL", testSignedURL},
		{"SignedURLTampered", testSignedURLTampered},
		{"SignedURLExpired", testSignedURLExpired},
		{"SignedURLMissing", testSignedURLMissing},
		{"Closed", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.run == nil {
				testClosed(t, open)
				return
			}
			tc.run(t, open(t))
		})
	}
}

// Main runs an implementation's tests, then cleanup, and fails the test
// binary if goroutines outlive the tests.
func Main(m *testing.M, cleanup ...func()) {
	before := len(goroutines())
	code := m.Run()
	for _, f := range cleanup {
		f()
	}
	if code == 0 {
		if err := noLeaks(before); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// goroutines returns the stacks of running goroutines, leaving out the
// runtime's own signal loop (started for good by os/signal, which the
// fuzzing engine uses).
func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "os/signal.signal_recv") {
			out = append(out, g)
		}
	}
	return out
}

// noLeaks waits until no more goroutines run than before did.
func noLeaks(before int) error {
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(patience)
	for {
		gs := goroutines()
		if len(gs) <= before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("goroutines leaked: %d running after the tests, %d before:\n%s",
				len(gs), before, strings.Join(gs, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MiB is a mebibyte.
const MiB = 1 << 20

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1})
	r.Read(b)
	return b
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func put(t *testing.T, s blob.Store, key string, data []byte, ct string) blob.Object {
	t.Helper()
	o, err := s.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)), ct)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return o
}

// read returns key's content and description from Get.
func read(t *testing.T, s blob.Store, key string) ([]byte, blob.Object) {
	t.Helper()
	rc, o, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return b, o
}

// sameObject compares descriptions; ModTime only to within two seconds,
// because S3 keeps it to the second and Put can only estimate it there.
var sameObject = cmp.Options{
	cmpopts.EquateApproxTime(2 * time.Second),
}

// checkStored checks that key holds data, described as want everywhere.
func checkStored(t *testing.T, s blob.Store, key string, data []byte, want blob.Object) {
	t.Helper()
	got, o := read(t, s, key)
	if !bytes.Equal(got, data) {
		t.Errorf("Get(%q): %d bytes (sha256 %s), want %d (sha256 %s)", key, len(got), hexSum(got), len(data), hexSum(data))
	}
	if d := cmp.Diff(want, o, sameObject); d != "" {
		t.Errorf("Get(%q) object (-want +got):\n%s", key, d)
	}
	st, err := s.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	if d := cmp.Diff(want, st, sameObject); d != "" {
		t.Errorf("Stat(%q) (-want +got):\n%s", key, d)
	}
}

func testRoundTrip(t *testing.T, s blob.Store) {
	tests := []struct {
		name string
		data []byte
		ct   string
	}{
		{"empty", nil, "text/plain"},
		{"small", []byte("hello, corral\n"), "text/plain; charset=utf-8"},
		{"binary", randomBytes(1, 64<<10), "application/octet-stream"},
		{"20MiB", randomBytes(2, 20*MiB), "image/png"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "tenant/executions/rt/output/" + tc.name
			before := time.Now()
			o := put(t, s, key, tc.data, tc.ct)
			want := blob.Object{Key: key, Size: int64(len(tc.data)), ContentType: tc.ct, SHA256: hexSum(tc.data), ModTime: o.ModTime}
			if d := cmp.Diff(want, o); d != "" {
				t.Errorf("Put (-want +got):\n%s", d)
			}
			if o.ModTime.Before(before.Add(-2*time.Second)) || o.ModTime.After(time.Now().Add(2*time.Second)) {
				t.Errorf("Put ModTime %v, not around now", o.ModTime)
			}
			checkStored(t, s, key, tc.data, o)
		})
	}
}

// onlyReader hides everything but Read (bytes.Reader's WriterTo, Seeker,
// ReaderAt), as a pipe or a socket would.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func testUnknownSize(t *testing.T, s blob.Store) {
	for _, n := range []int{0, 1, 100 << 10, 20 * MiB} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			data := randomBytes(uint64(n), n)
			key := "t/unknown/" + strconv.Itoa(n)
			o, err := s.Put(t.Context(), key, onlyReader{bytes.NewReader(data)}, -1, "")
			if err != nil {
				t.Fatalf("Put(-1): %v", err)
			}
			want := blob.Object{Key: key, Size: int64(n), ContentType: blob.DefaultContentType, SHA256: hexSum(data), ModTime: o.ModTime}
			if d := cmp.Diff(want, o); d != "" {
				t.Errorf("Put (-want +got):\n%s", d)
			}
			checkStored(t, s, key, data, o)
		})
	}
}

func testSizeMismatch(t *testing.T, s blob.Store) {
	small := []byte("0123456789")
	big := randomBytes(3, 20*MiB)
	tests := []struct {
		name string
		data []byte
		size int64
	}{
		{"short", small, 11},
		{"long", small, 9},
		{"zero but data", small, 0},
		{"data but none", nil, 1},
		{"short large", big, int64(len(big)) + 1},
		{"long large", big, int64(len(big)) - 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "t/mismatch/" + strings.ReplaceAll(tc.name, " ", "-")
			_, err := s.Put(t.Context(), key, onlyReader{bytes.NewReader(tc.data)}, tc.size, "")
			if !errors.Is(err, blob.ErrSizeMismatch) {
				t.Errorf("Put(%d bytes, size %d) = %v, want ErrSizeMismatch", len(tc.data), tc.size, err)
			}
			if _, err := s.Stat(t.Context(), key); !errors.Is(err, blob.ErrNotFound) {
				t.Errorf("Stat after a failed Put = %v, want ErrNotFound", err)
			}
		})
	}
	if _, err := s.Put(t.Context(), "t/mismatch/negative", bytes.NewReader(nil), -2, ""); !errors.Is(err, blob.ErrInvalid) {
		t.Errorf("Put(size -2) = %v, want ErrInvalid", err)
	}
	// A failed Put leaves the object it would have replaced.
	put(t, s, "t/mismatch/kept", small, "text/plain")
	if _, err := s.Put(t.Context(), "t/mismatch/kept", bytes.NewReader(big), 1, ""); !errors.Is(err, blob.ErrSizeMismatch) {
		t.Errorf("Put over an object with a wrong size = %v, want ErrSizeMismatch", err)
	}
	if got, _ := read(t, s, "t/mismatch/kept"); !bytes.Equal(got, small) {
		t.Errorf("object replaced by a failed Put: %q", got)
	}
	if objs := list(t, s, "t/mismatch/"); len(objs) != 1 {
		t.Errorf("List after failed Puts: %v, want only t/mismatch/kept", keysOf(objs))
	}
}

func testContentType(t *testing.T, s blob.Store) {
	for _, ct := range []string{"", "text/html", "text/csv; charset=utf-8", "image/svg+xml", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"} {
		o := put(t, s, "t/ct/x", []byte("x"), ct)
		want := ct
		if want == "" {
			want = blob.DefaultContentType
		}
		if o.ContentType != want {
			t.Errorf("Put(%q).ContentType = %q", ct, o.ContentType)
		}
		if st, err := s.Stat(t.Context(), "t/ct/x"); err != nil || st.ContentType != want {
			t.Errorf("Stat after Put(%q) = %q, %v; want %q", ct, st.ContentType, err, want)
		}
	}
	for _, ct := range []string{"text/html\r\nX-Evil: 1", "not a type", "text/", "text/plain; charset=\x00", strings.Repeat("a", 300) + "/b", "tëxt/plain"} {
		if _, err := s.Put(t.Context(), "t/ct/bad", strings.NewReader("x"), 1, ct); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("Put(content type %q) = %v, want ErrInvalid", ct, err)
		}
	}
	if _, err := s.Stat(t.Context(), "t/ct/bad"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat after refused Puts = %v, want ErrNotFound", err)
	}
}

func testOverwrite(t *testing.T, s blob.Store) {
	const key = "t/over/file.txt"
	put(t, s, key, randomBytes(4, 17*MiB), "application/octet-stream")
	data := []byte("second")
	o := put(t, s, key, data, "text/plain")
	checkStored(t, s, key, data, o)
	big := randomBytes(5, 17*MiB)
	o = put(t, s, key, big, "image/png")
	checkStored(t, s, key, big, o)
}

func testNotFound(t *testing.T, s blob.Store) {
	ctx := t.Context()
	for _, key := range []string{"t/nf/missing", "missing", "t/nf/dir/x"} {
		if _, _, err := s.Get(ctx, key); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Stat(%q) = %v, want ErrNotFound", key, err)
		}
		if err := s.Delete(ctx, key); err != nil {
			t.Errorf("Delete(%q) = %v, want nil", key, err)
		}
	}
	// A "directory" of other keys is not an object.
	put(t, s, "t/nf/dir/y", []byte("y"), "")
	if _, err := s.Stat(ctx, "t/nf/dir"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat of a key's parent = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get(ctx, "t/nf/dir"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Get of a key's parent = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "t/nf/dir"); err != nil {
		t.Errorf("Delete of a key's parent = %v, want nil", err)
	}
	if _, err := s.Stat(ctx, "t/nf/dir/y"); err != nil {
		t.Errorf("Delete of a key's parent removed the key: Stat = %v", err)
	}
	if err := s.Delete(ctx, "t/nf/dir/y"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "t/nf/dir/y"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat after Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "t/nf/dir/y"); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
}

func list(t *testing.T, s blob.Store, prefix string) []blob.Object {
	t.Helper()
	objs, err := s.List(t.Context(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return objs
}

func keysOf(objs []blob.Object) []string {
	keys := []string{}
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

func testList(t *testing.T, s blob.Store) {
	keys := []string{
		"acme/sessions/s1/files/a.txt",
		"acme/sessions/s1/files/sub/b.csv",
		"acme/sessions/s1/files/sub/deeper/c",
		"acme/sessions/s10/files/x",
		"acme/sessions/s1-b/files/y",
		"acme/sessions/s1.x",
		"acme/executions/e1/output/plot.png",
		"other/sessions/s1/files/a.txt",
		"acme/sessions/s1/files/sub-x",
	}
	want := map[string]blob.Object{}
	for i, k := range keys {
		data := []byte(strings.Repeat(k, i+1))
		want[k] = put(t, s, k, data, "text/plain")
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"acme/sessions/s1/", []string{"acme/sessions/s1/files/a.txt", "acme/sessions/s1/files/sub-x", "acme/sessions/s1/files/sub/b.csv", "acme/sessions/s1/files/sub/deeper/c"}},
		{"acme/sessions/s1", []string{"acme/sessions/s1-b/files/y", "acme/sessions/s1.x", "acme/sessions/s1/files/a.txt", "acme/sessions/s1/files/sub-x", "acme/sessions/s1/files/sub/b.csv", "acme/sessions/s1/files/sub/deeper/c", "acme/sessions/s10/files/x"}},
		{"acme/sessions/s1/files/sub", []string{"acme/sessions/s1/files/sub-x", "acme/sessions/s1/files/sub/b.csv", "acme/sessions/s1/files/sub/deeper/c"}},
		{"acme/sessions/s1/files/a.txt", []string{"acme/sessions/s1/files/a.txt"}},
		{"acme/sessions/s1/files/a.txt/", []string{}},
		{"acme/executions/", []string{"acme/executions/e1/output/plot.png"}},
		{"nothing/", []string{}},
		{"a", nil}, // every acme key, checked below
		{"", nil},  // everything
	}
	for _, tc := range tests {
		objs := list(t, s, tc.prefix)
		exp := tc.want
		if exp == nil {
			exp = []string{}
			for _, k := range keys {
				if strings.HasPrefix(k, tc.prefix) {
					exp = append(exp, k)
				}
			}
			slices.Sort(exp)
		}
		if d := cmp.Diff(exp, keysOf(objs)); d != "" {
			t.Errorf("List(%q) keys (-want +got):\n%s", tc.prefix, d)
		}
		for _, o := range objs {
			if d := cmp.Diff(want[o.Key], o, sameObject); d != "" {
				t.Errorf("List(%q): %s (-want +got):\n%s", tc.prefix, o.Key, d)
			}
		}
	}
	for _, p := range []string{"/acme", "acme//s", "acme/../x", "acme/./x", "a\x00b", "a\nb", strings.Repeat("a", blob.MaxKeyLen+1)} {
		if _, err := s.List(t.Context(), p); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("List(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

func testDeletePrefix(t *testing.T, s blob.Store) {
	ctx := t.Context()
	keys := []string{
		"acme/sessions/s1/files/a",
		"acme/sessions/s1/files/deep/er/b",
		"acme/sessions/s10/files/c",
		"acme/sessions/s1x",
		"acme/executions/e1/output/d",
	}
	for _, k := range keys {
		put(t, s, k, []byte(k), "")
	}
	if err := s.DeletePrefix(ctx, "acme/sessions/s1/"); err != nil {
		t.Fatalf("DeletePrefix: %v", err)
	}
	if d := cmp.Diff([]string{"acme/executions/e1/output/d", "acme/sessions/s10/files/c", "acme/sessions/s1x"}, keysOf(list(t, s, ""))); d != "" {
		t.Errorf("after DeletePrefix(acme/sessions/s1/) (-want +got):\n%s", d)
	}
	// Objects can be stored again where a prefix was deleted.
	put(t, s, "acme/sessions/s1/files/a", []byte("again"), "")
	if err := s.DeletePrefix(ctx, "acme/sessions/s1"); err != nil {
		t.Fatalf("DeletePrefix: %v", err)
	}
	if d := cmp.Diff([]string{"acme/executions/e1/output/d"}, keysOf(list(t, s, ""))); d != "" {
		t.Errorf("after DeletePrefix(acme/sessions/s1) (-want +got):\n%s", d)
	}
	if err := s.DeletePrefix(ctx, "nothing/here/"); err != nil {
		t.Errorf("DeletePrefix of nothing = %v", err)
	}
	for _, p := range []string{"", "/", "acme/../", "a\x00"} {
		if err := s.DeletePrefix(ctx, p); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("DeletePrefix(%q) = %v, want ErrInvalid", p, err)
		}
	}
	if n := len(list(t, s, "")); n != 1 {
		t.Errorf("refused DeletePrefix calls deleted something: %d objects left", n)
	}
	// Many objects.
	for i := range 150 {
		put(t, s, fmt.Sprintf("bulk/%d/f", i), []byte("x"), "")
	}
	if err := s.DeletePrefix(ctx, "bulk/"); err != nil {
		t.Fatalf("DeletePrefix(bulk/): %v", err)
	}
	if objs := list(t, s, "bulk/"); len(objs) != 0 {
		t.Errorf("DeletePrefix(bulk/) left %d objects", len(objs))
	}
}

// oddKeys are valid keys that stress escaping in paths and URLs.
var oddKeys = []string{
	"t/odd/with space.txt",
	"t/odd/ünïcødé/文件.png",
	"t/odd/percent%20and%2Fslash",
	"t/odd/query?x=1&y=2#frag",
	"t/odd/plus+equals=semi;colon,comma",
	"t/odd/quote\"apos'back\\slash",
	"t/odd/<script>alert(1)</script>.html",
	"t/odd/.hidden",
	"t/odd/...",
	"t/odd/..x",
	"t/odd/~tilde!$*()",
	"t/odd/" + strings.Repeat("n", blob.MaxSegmentLen),
}

func testKeys(t *testing.T, s blob.Store) {
	for i, k := range oddKeys {
		data := []byte(fmt.Sprintf("object %d: %s", i, k))
		o := put(t, s, k, data, "text/plain")
		checkStored(t, s, k, data, o)
	}
	if d := cmp.Diff(slices.Sorted(slices.Values(oddKeys)), keysOf(list(t, s, "t/odd/"))); d != "" {
		t.Errorf("List (-want +got):\n%s", d)
	}
	long := strings.Repeat(strings.Repeat("k", 99)+"/", 10) + "end"
	if len(long) > blob.MaxKeyLen {
		t.Fatal("test key too long")
	}
	put(t, s, long, []byte("deep"), "")
	if got, _ := read(t, s, long); string(got) != "deep" {
		t.Errorf("long key: %q", got)
	}
}

// InvalidKeys are keys every Store refuses with ErrInvalid.
var InvalidKeys = []string{
	"",
	"/abs/path",
	"/",
	"a/",
	"a//b",
	"..",
	"../x",
	"a/../b",
	"a/..",
	".",
	"./a",
	"a/./b",
	"a\x00b",
	"a\nb",
	"a\rb",
	"a\tb",
	"a\x7fb",
	"bad\xffutf8",
	strings.Repeat("a", blob.MaxSegmentLen+1),
	strings.Repeat("a/", blob.MaxKeyLen/2) + "a",
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	ctx := t.Context()
	for _, k := range InvalidKeys {
		if _, err := s.Put(ctx, k, strings.NewReader("x"), 1, ""); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("Put(%q) = %v, want ErrInvalid", k, err)
		}
		if _, _, err := s.Get(ctx, k); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("Get(%q) = %v, want ErrInvalid", k, err)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("Stat(%q) = %v, want ErrInvalid", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("Delete(%q) = %v, want ErrInvalid", k, err)
		}
		if _, _, err := s.SignedURL(ctx, k, time.Minute); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("SignedURL(%q) = %v, want ErrInvalid", k, err)
		}
	}
	if objs := list(t, s, ""); len(objs) != 0 {
		t.Errorf("refused Puts stored %v", keysOf(objs))
	}
}

// testConflict: a key and a key under it ("a" and "a/b") may not both be
// storable (file-system backed stores), but a Put that cannot be done
// says ErrConflict and harms neither.
func testConflict(t *testing.T, s blob.Store) {
	ctx := t.Context()
	put(t, s, "t/conflict/file", []byte("file"), "")
	_, err := s.Put(ctx, "t/conflict/file/child", strings.NewReader("child"), 5, "")
	if err != nil && !errors.Is(err, blob.ErrConflict) {
		t.Errorf("Put under an object = %v, want nil or ErrConflict", err)
	}
	if got, _ := read(t, s, "t/conflict/file"); string(got) != "file" {
		t.Errorf("object changed by a Put under it: %q", got)
	}
	put(t, s, "t/conflict/dir/child", []byte("child"), "")
	_, err = s.Put(ctx, "t/conflict/dir", strings.NewReader("dir"), 3, "")
	if err != nil && !errors.Is(err, blob.ErrConflict) {
		t.Errorf("Put of a key's parent = %v, want nil or ErrConflict", err)
	}
	if got, _ := read(t, s, "t/conflict/dir/child"); string(got) != "child" {
		t.Errorf("object changed by a Put of its parent: %q", got)
	}
}

func testConcurrentPuts(t *testing.T, s blob.Store) {
	const n = 16
	datas := make([][]byte, n)
	for i := range datas {
		datas[i] = randomBytes(uint64(100+i), 1+i*(64<<10))
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Put(t.Context(), fmt.Sprintf("t/conc/own/%d", i), onlyReader{bytes.NewReader(datas[i])}, -1, "")
		})
		wg.Go(func() {
			_, errs[n+i] = s.Put(t.Context(), "t/conc/shared", bytes.NewReader(datas[i]), int64(len(datas[i])), "")
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		got, o := read(t, s, fmt.Sprintf("t/conc/own/%d", i))
		if !bytes.Equal(got, datas[i]) || o.SHA256 != hexSum(datas[i]) {
			t.Errorf("t/conc/own/%d: wrong content or sha256", i)
		}
	}
	got, o := read(t, s, "t/conc/shared")
	if !slices.ContainsFunc(datas, func(d []byte) bool { return bytes.Equal(d, got) }) {
		t.Errorf("t/conc/shared: %d bytes that no Put wrote", len(got))
	}
	if o.SHA256 != hexSum(got) || o.Size != int64(len(got)) {
		t.Errorf("t/conc/shared: described as %d bytes, sha256 %s; content is %d bytes, sha256 %s", o.Size, o.SHA256, len(got), hexSum(got))
	}
}

// cancelReader cancels a context once it has yielded after bytes.
type cancelReader struct {
	r      io.Reader
	n      int
	after  int
	cancel func()
}

func (c *cancelReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if c.n >= c.after {
		c.cancel()
	}
	return n, err
}

func testCancelledPut(t *testing.T, s blob.Store) {
	for _, after := range []int{1, 18 * MiB} {
		t.Run(strconv.Itoa(after), func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			key := "t/cancel/" + strconv.Itoa(after)
			data := randomBytes(6, 40*MiB)
			r := &cancelReader{r: bytes.NewReader(data), after: after, cancel: cancel}
			if _, err := s.Put(ctx, key, onlyReader{r}, -1, ""); err == nil {
				t.Fatal("Put succeeded after its ctx was cancelled")
			}
			if _, err := s.Stat(t.Context(), key); !errors.Is(err, blob.ErrNotFound) {
				t.Errorf("Stat after a cancelled Put = %v, want ErrNotFound", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Put(ctx, "t/cancel/before", strings.NewReader("x"), 1, ""); err == nil {
		t.Error("Put with a cancelled ctx succeeded")
	}
	if objs := list(t, s, "t/cancel/"); len(objs) != 0 {
		t.Errorf("cancelled Puts left %v", keysOf(objs))
	}
}

// errReader fails after yielding n bytes.
type errReader struct {
	n   int
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	if e.n == 0 {
		return 0, e.err
	}
	m := min(len(p), e.n)
	clear(p[:m])
	e.n -= m
	return m, nil
}

func testReaderError(t *testing.T, s blob.Store) {
	boom := errors.New("boom")
	for _, n := range []int{0, 100, 20 * MiB} {
		key := "t/rerr/" + strconv.Itoa(n)
		_, err := s.Put(t.Context(), key, &errReader{n: n, err: boom}, -1, "")
		if !errors.Is(err, boom) {
			t.Errorf("Put from a reader failing after %d bytes = %v, want its error", n, err)
		}
		if _, err := s.Stat(t.Context(), key); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Stat after a failed Put = %v, want ErrNotFound", err)
		}
	}
}

// genReader yields left pseudo-random bytes without holding them, hashing
// them as it goes, and calls sample every sampleEvery bytes.
type genReader struct {
	rng    *rand.ChaCha8
	left   int64
	h      hash.Hash
	sample func()
	since  int64
}

const sampleEvery = 8 * MiB

func (g *genReader) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), g.left)]
	g.rng.Read(p)
	g.h.Write(p)
	g.left -= int64(len(p))
	if g.since += int64(len(p)); g.since >= sampleEvery {
		g.since = 0
		g.sample()
	}
	return len(p), nil
}

// hashWriter hashes what a download yields and samples the heap as
// genReader does.
type hashWriter struct {
	h      hash.Hash
	n      int64
	sample func()
	since  int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	w.h.Write(p)
	w.n += int64(len(p))
	if w.since += int64(len(p)); w.since >= sampleEvery {
		w.since = 0
		w.sample()
	}
	return len(p), nil
}

// LargeSize and HeapBound: storing or reading LargeSize bytes may grow the
// heap by less than HeapBound.
const (
	LargeSize = 256 * MiB
	HeapBound = 64 * MiB
)

// HeapGrowth is how much the process's heap grew while something ran.
type HeapGrowth struct {
	// InUse is the peak of runtime.MemStats.HeapInuse over its value
	// before, after two GCs; Sys the same for HeapSys (heap memory
	// obtained from the OS).
	InUse, Sys int64
	Samples    int
}

func (g HeapGrowth) String() string {
	return fmt.Sprintf("heap in use grew by at most %.1f MiB, heap from the OS by %.1f MiB (%d samples)",
		float64(g.InUse)/MiB, float64(g.Sys)/MiB, g.Samples)
}

// MeasureHeap runs f, sampling the heap every 20 ms and whenever f calls
// the sample function it is given (from inside the data path, so no
// stretch of work goes unseen). The heap is the whole process's, so
// nothing else may run meanwhile.
func MeasureHeap(f func(sample func())) HeapGrowth {
	var (
		mu               sync.Mutex
		maxInuse, maxSys uint64
		samples          int
	)
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		maxInuse, maxSys = max(maxInuse, ms.HeapInuse), max(maxSys, ms.HeapSys)
		samples++
		mu.Unlock()
	}
	runtime.GC()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	maxInuse, maxSys = base.HeapInuse, base.HeapSys
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	})
	f(sample)
	sample()
	close(stop)
	wg.Wait()
	return HeapGrowth{InUse: int64(maxInuse) - int64(base.HeapInuse), Sys: int64(maxSys) - int64(base.HeapSys), Samples: samples}
}

// MeasurePut stores LargeSize generated bytes under key and reports the
// heap's growth meanwhile and the content's SHA-256.
func MeasurePut(ctx context.Context, s blob.Store, key string, sizeKnown bool) (blob.Object, HeapGrowth, string, error) {
	var (
		o   blob.Object
		err error
		g   *genReader
	)
	size := int64(-1)
	if sizeKnown {
		size = LargeSize
	}
	growth := MeasureHeap(func(sample func()) {
		g = &genReader{rng: rand.NewChaCha8([32]byte{7}), left: LargeSize, h: sha256.New(), sample: sample}
		o, err = s.Put(ctx, key, g, size, "application/octet-stream")
	})
	return o, growth, hex.EncodeToString(g.h.Sum(nil)), err
}

func testLargePutMemory(t *testing.T, s blob.Store) {
	if testing.Short() {
		t.Skip("stores 256 MiB; skipped with -short")
	}
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("size_known=%v", known), func(t *testing.T) {
			key := fmt.Sprintf("t/large/%v", known)
			start := time.Now()
			o, growth, want, err := MeasurePut(t.Context(), s, key, known)
			if err != nil {
				t.Fatalf("Put 256 MiB: %v", err)
			}
			t.Logf("Put %d MiB (size known: %v) in %v: %v", LargeSize/MiB, known, time.Since(start).Round(time.Millisecond), growth)
			if o.Size != LargeSize || o.SHA256 != want {
				t.Errorf("Put = size %d sha256 %s, want %d %s", o.Size, o.SHA256, LargeSize, want)
			}
			if growth.InUse >= HeapBound || growth.Sys >= HeapBound {
				t.Errorf("Put: %v; want < %d MiB", growth, HeapBound/MiB)
			}
			if !known {
				return
			}
			// What was stored is what was generated, read back streaming.
			var (
				n      int64
				st     blob.Object
				getErr error
				h      = sha256.New()
			)
			start = time.Now()
			growth = MeasureHeap(func(sample func()) {
				var rc io.ReadCloser
				rc, st, getErr = s.Get(t.Context(), key)
				if getErr != nil {
					return
				}
				defer rc.Close()
				w := &hashWriter{h: h, sample: sample}
				_, getErr = io.Copy(w, rc)
				n = w.n
			})
			if getErr != nil {
				t.Fatal(getErr)
			}
			t.Logf("Get %d MiB in %v: %v", LargeSize/MiB, time.Since(start).Round(time.Millisecond), growth)
			if n != LargeSize || hex.EncodeToString(h.Sum(nil)) != want || st.SHA256 != want {
				t.Errorf("Get: %d bytes, sha256 %x, described %s; want %s", n, h.Sum(nil), st.SHA256, want)
			}
			if growth.InUse >= HeapBound || growth.Sys >= HeapBound {
				t.Errorf("Get: %v; want < %d MiB", growth, HeapBound/MiB)
			}
		})
	}
}

// fetch GETs u with a plain client.
func fetch(t *testing.T, u string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatalf("request %s: %v", u, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp, b
}

func testSignedURL(t *testing.T, s blob.Store) {
	ctx := t.Context()
	keys := append([]string{"acme/executions/e1/output/plot.png", "acme/executions/e1/output/page.html"}, oddKeys...)
	for i, key := range keys {
		data := randomBytes(uint64(i), 1000+i)
		ct := "image/png"
		if strings.HasSuffix(key, ".html") {
			data, ct = []byte("<html><script>alert(document.cookie)</script></html>"), "text/html"
		}
		put(t, s, key, data, ct)
		ttl := 10 * time.Minute
		before := time.Now()
		u, exp, err := s.SignedURL(ctx, key, ttl)
		if err != nil {
			t.Fatalf("SignedURL(%q): %v", key, err)
		}
		if pu, err := url.Parse(u); err != nil || !pu.IsAbs() {
			t.Errorf("SignedURL(%q) = %q: not an absolute URL", key, u)
		}
		if exp.Before(before.Add(ttl).Add(-time.Second)) || exp.After(time.Now().Add(ttl+2*time.Second)) {
			t.Errorf("SignedURL(%q) expires %v, want about %v", key, exp, before.Add(ttl))
		}
		resp, got := fetch(t, u)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET SignedURL(%q): %s: %s", key, resp.Status, got)
			continue
		}
		if !bytes.Equal(got, data) {
			t.Errorf("GET SignedURL(%q): %d bytes (sha256 %s), want %d (%s)", key, len(got), hexSum(got), len(data), hexSum(data))
		}
		if got := resp.Header.Get("Content-Type"); got != ct {
			t.Errorf("GET SignedURL(%q): Content-Type %q, want %q", key, got, ct)
		}
		if got := resp.Header.Get("Content-Disposition"); !strings.HasPrefix(got, "attachment") {
			t.Errorf("GET SignedURL(%q): Content-Disposition %q, want attachment", key, got)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond, blob.MaxTTL + time.Second} {
		if _, _, err := s.SignedURL(ctx, keys[0], ttl); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("SignedURL(ttl %v) = %v, want ErrInvalid", ttl, err)
		}
	}
}

// refused checks that GET u is refused with 403.
func refused(t *testing.T, what, u string) {
	t.Helper()
	resp, body := fetch(t, u)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("%s: %s, want 403 Forbidden\n%s\n%.300s", what, resp.Status, u, body)
	}
}

// isHex64 reports whether v looks like an HMAC-SHA256 signature.
func isHex64(v string) bool {
	_, err := hex.DecodeString(v)
	return len(v) == 64 && err == nil
}

func isInt(v string) bool {
	_, err := strconv.ParseInt(v, 10, 64)
	return err == nil
}

// testSignedURLTampered changes every part of a link in turn: the key (to
// a neighbour that exists, which must still be unreachable), the expiry,
// the signature, and every other query parameter.
func testSignedURLTampered(t *testing.T, s blob.Store) {
	ctx := t.Context()
	const key, other = "acme/executions/e1/output/a.txt", "acme/executions/e1/output/b.txt"
	put(t, s, key, []byte("a"), "text/plain")
	put(t, s, other, []byte("secret b"), "text/plain")
	good, _, err := s.SignedURL(ctx, key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := fetch(t, good); resp.StatusCode != http.StatusOK {
		t.Fatalf("untampered link: %s", resp.Status)
	}
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}

	// The key.
	for _, p := range []string{
		strings.Replace(u.EscapedPath(), "a.txt", "b.txt", 1),
		strings.Replace(u.EscapedPath(), "a.txt", "A.txt", 1),
		strings.Replace(u.EscapedPath(), "/e1/", "/e2/", 1),
		strings.Replace(u.EscapedPath(), "a.txt", "a.txt/", 1),
		strings.Replace(u.EscapedPath(), "a.txt", "a.txtx", 1),
		strings.Replace(u.EscapedPath(), "/a.txt", "/../output/b.txt", 1),
		strings.Replace(u.EscapedPath(), "/a.txt", "/%2e%2e/output/b.txt", 1),
	} {
		v := *u
		v.RawPath, v.Path = p, ""
		if pp, err := url.PathUnescape(p); err == nil {
			v.Path = pp
		}
		refused(t, "path "+p, v.String())
	}

	// The query: a changed signature (64 hex digits) or expiry (an
	// integer) must be 403. Any other change, or an empty or missing
	// signature or expiry, must be refused too, but S3 may call that a
	// malformed request (400) rather than a forbidden one; the local
	// store's own tests hold it to 403.
	q := u.Query()
	var sigs, ints int
	for name := range q {
		val := q.Get(name)
		type change struct {
			val    string
			del    bool
			strict bool
		}
		changes := []change{{val: val + "0"}, {val: flip(val)}, {val: ""}, {del: true}}
		switch {
		case isHex64(val):
			sigs++
			changes[0].strict, changes[1].strict = true, true
			changes = append(changes, change{val: strings.ToUpper(val), strict: true})
		case isInt(val):
			ints++
			n, _ := strconv.ParseInt(val, 10, 64)
			for _, tv := range []string{strconv.FormatInt(n+3600, 10), strconv.FormatInt(n+1, 10), strconv.FormatInt(n-1, 10), "+" + val, "0" + val} {
				changes = append(changes, change{val: tv, strict: true})
			}
			changes[0].strict, changes[1].strict = true, true
		}
		for _, c := range changes {
			v := *u
			qq := u.Query()
			what := fmt.Sprintf("%s=%q", name, c.val)
			if c.del {
				qq.Del(name)
				what = "without " + name
			} else {
				qq.Set(name, c.val)
			}
			v.RawQuery = qq.Encode()
			if c.strict {
				refused(t, what, v.String())
				continue
			}
			if resp, _ := fetch(t, v.String()); resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %s, want 403 or 400", what, resp.Status)
			}
		}
	}
	if sigs != 1 || ints < 1 {
		t.Errorf("link %s: found %d hex signatures and %d integer (expiry) parameters; want one signature and an expiry", good, sigs, ints)
	}
	v := *u
	v.RawQuery = ""
	refused(t, "no query", v.String())

	// Another key's signature does not open this one.
	otherURL, _, err := s.SignedURL(ctx, other, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ou, _ := url.Parse(otherURL)
	v = *u
	v.RawQuery = ou.RawQuery
	refused(t, "signature of another key", v.String())
}

// flip changes v's last character.
func flip(v string) string {
	if v == "" {
		return "x"
	}
	last := v[len(v)-1]
	switch {
	case last == '0':
		last = '1'
	case last >= '1' && last <= '9', last >= 'a' && last <= 'z', last >= 'A' && last <= 'Z':
		last--
	default:
		last = 'x'
	}
	return v[:len(v)-1] + string(last)
}

func testSignedURLExpired(t *testing.T, s blob.Store) {
	const key = "acme/executions/e1/output/soon.txt"
	put(t, s, key, []byte("soon gone"), "text/plain")
	u, exp, err := s.SignedURL(t.Context(), key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := fetch(t, u); resp.StatusCode != http.StatusOK && time.Now().Before(exp) {
		t.Fatalf("fresh link: %s: %s", resp.Status, body)
	}
	if time.Until(exp) > patience {
		t.Fatalf("a 1s link expires at %v", exp)
	}
	// Past the stated expiry, with a second to spare for S3's clock.
	time.Sleep(time.Until(exp) + 1500*time.Millisecond)
	refused(t, "expired link", u)
}

func testSignedURLMissing(t *testing.T, s blob.Store) {
	const key = "acme/executions/e1/output/gone.txt"
	put(t, s, key, []byte("gone"), "text/plain")
	u, _, err := s.SignedURL(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if resp, body := fetch(t, u); resp.StatusCode != http.StatusNotFound {
		t.Errorf("link to a deleted object: %s, want 404\n%.300s", resp.Status, body)
	}
	// A link may be made before the object exists.
	u, _, err = s.SignedURL(t.Context(), "acme/executions/e1/output/later.txt", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "acme/executions/e1/output/later.txt", []byte("later"), "text/plain")
	if resp, body := fetch(t, u); resp.StatusCode != http.StatusOK || string(body) != "later" {
		t.Errorf("link made before Put: %s %q", resp.Status, body)
	}
}

func testClosed(t *testing.T, open Opener) {
	s := open(t)
	put(t, s, "t/closed/x", []byte("x"), "")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	if _, err := s.Put(ctx, "t/closed/y", strings.NewReader("y"), 1, ""); err == nil {
		t.Error("Put after Close succeeded")
	}
	if _, err := s.Stat(ctx, "t/closed/x"); err == nil {
		t.Error("Stat after Close succeeded")
	}
	if _, err := s.List(ctx, ""); err == nil {
		t.Error("List after Close succeeded")
	}
}
