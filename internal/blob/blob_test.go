package blob_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/blob"
)

var validKeys = []string{
	"a",
	"tenant/executions/0190f3a2/output/plot.png",
	"t/s/files/with space/ünï/文件.txt",
	"t/.hidden/...",
	"t/..x/x..",
	"t/a\\b",
	strings.Repeat("k", blob.MaxSegmentLen),
	strings.Repeat(strings.Repeat("k", 99)+"/", 10) + "end",
}

var invalidKeys = []string{
	"",
	"/abs",
	"/",
	"a/",
	"a//b",
	".",
	"..",
	"../a",
	"a/..",
	"a/../b",
	"a/./b",
	"a\x00b",
	"a\nb",
	"a\x1bb",
	"a\x7fb",
	"\xff",
	"a/\xc3",
	strings.Repeat("k", blob.MaxSegmentLen+1),
	strings.Repeat("k/", blob.MaxKeyLen/2) + "k",
}

func TestValidateKey(t *testing.T) {
	for _, k := range validKeys {
		if err := blob.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
		if err := blob.ValidatePrefix(k); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v: a valid key is a valid prefix", k, err)
		}
	}
	for _, k := range invalidKeys {
		if err := blob.ValidateKey(k); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalid", k, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "t/", "t/s1", "t/s1/", "t/.", "t/..", "t/.hid", "a"} {
		if err := blob.ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/", "/t", "t//", "t/../", "./", "t\x00", "t\n", "\xff", strings.Repeat("k", blob.MaxKeyLen+1), strings.Repeat("k", blob.MaxSegmentLen+1)} {
		if err := blob.ValidatePrefix(p); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

// FuzzValidateKey: an accepted key can be nothing that escapes a
// directory or confuses a file system, a header or a signature.
func FuzzValidateKey(f *testing.F) {
	for _, k := range append(validKeys, invalidKeys...) {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if blob.ValidateKey(key) != nil {
			return
		}
		if key == "" || len(key) > blob.MaxKeyLen || !utf8.ValidString(key) || strings.HasPrefix(key, "/") {
			t.Fatalf("accepted %q", key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." || len(seg) > blob.MaxSegmentLen {
				t.Fatalf("accepted %q with segment %q", key, seg)
			}
		}
		if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("accepted control character in %q", key)
		}
		if blob.ValidatePrefix(key) != nil {
			t.Fatalf("key %q is not a valid prefix", key)
		}
	})
}

func TestContentType(t *testing.T) {
	for in, want := range map[string]string{
		"":                           blob.DefaultContentType,
		"text/plain":                 "text/plain",
		"text/csv; charset=utf-8":    "text/csv; charset=utf-8",
		"application/vnd.api+json":   "application/vnd.api+json",
		`text/plain; name="a b.txt"`: `text/plain; name="a b.txt"`,
	} {
		if got, err := blob.ContentType(in); err != nil || got != want {
			t.Errorf("ContentType(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"text", "text/", "text/plain\r\nX: y", "tëxt/plain", "a/b; c", strings.Repeat("a", 300) + "/b"} {
		if _, err := blob.ContentType(in); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("ContentType(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

func TestCheckTTL(t *testing.T) {
	for _, ttl := range []time.Duration{time.Second, 15 * time.Minute, blob.MaxTTL} {
		if err := blob.CheckTTL(ttl); err != nil {
			t.Errorf("CheckTTL(%v) = %v", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Minute, time.Second - 1, blob.MaxTTL + 1} {
		if err := blob.CheckTTL(ttl); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("CheckTTL(%v) = %v, want ErrInvalid", ttl, err)
		}
	}
}

func TestHashReader(t *testing.T) {
	data := []byte(strings.Repeat("corral ", 1000))
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	readers := map[string]func() io.Reader{
		"plain":    func() io.Reader { return bytes.NewReader(data) },
		"onebyte":  func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
		"dataeof":  func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
		"halfread": func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
	}
	for name, r := range readers {
		for _, size := range []int64{int64(len(data)), -1} {
			h := blob.NewHashReader(r(), size)
			got, err := io.ReadAll(h)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s size %d: ReadAll = %d bytes, %v", name, size, len(got), err)
			}
			if err := h.Verify(); err != nil {
				t.Errorf("%s size %d: Verify = %v", name, size, err)
			}
			if h.N() != int64(len(data)) || h.Sum() != want {
				t.Errorf("%s size %d: N %d Sum %s", name, size, h.N(), h.Sum())
			}
		}
		for _, size := range []int64{0, 1, int64(len(data)) - 1, int64(len(data)) + 1} {
			h := blob.NewHashReader(r(), size)
			if _, err := io.ReadAll(h); !errors.Is(err, blob.ErrSizeMismatch) {
				t.Errorf("%s: %d bytes read as %d: %v, want ErrSizeMismatch", name, len(data), size, err)
			}
			if err := h.Verify(); !errors.Is(err, blob.ErrSizeMismatch) {
				t.Errorf("%s: Verify after a mismatch = %v", name, err)
			}
		}
	}
	// A consumer that stops at exactly size bytes still learns of excess.
	h := blob.NewHashReader(bytes.NewReader(data), 10)
	buf := make([]byte, 10)
	if _, err := io.ReadFull(h, buf); err != nil && !errors.Is(err, blob.ErrSizeMismatch) {
		t.Fatal(err)
	}
	if err := h.Verify(); !errors.Is(err, blob.ErrSizeMismatch) {
		t.Errorf("Verify after reading exactly size of a longer reader = %v", err)
	}
	// Size 0 can be verified before any read.
	if err := blob.NewHashReader(strings.NewReader(""), 0).Verify(); err != nil {
		t.Errorf("empty: %v", err)
	}
	if err := blob.NewHashReader(strings.NewReader("x"), 0).Verify(); !errors.Is(err, blob.ErrSizeMismatch) {
		t.Errorf("size 0 with data: %v", err)
	}
	// The reader's own error comes through.
	boom := errors.New("boom")
	if _, err := io.ReadAll(blob.NewHashReader(iotest.ErrReader(boom), -1)); !errors.Is(err, boom) {
		t.Errorf("reader error: %v", err)
	}
}

func TestDisposition(t *testing.T) {
	for key, want := range map[string]string{
		"t/e/output/plot.png":       `attachment; filename="plot.png"`,
		"t/e/output/ré sumé.pdf":    `attachment; filename="r__sum_.pdf"; filename*=UTF-8''r%C3%A9%20sum%C3%A9.pdf`,
		`t/e/output/a"b;c\d`:        `attachment; filename="a_b_c_d"; filename*=UTF-8''a%22b%3Bc%5Cd`,
		"t/e/output/.bashrc":        `attachment; filename="_bashrc"; filename*=UTF-8''.bashrc`,
		"t/e/output/文件":             `attachment; filename="__"; filename*=UTF-8''%E6%96%87%E4%BB%B6`,
		"t/e/output/<svg onload=x>": `attachment; filename="_svg_onload_x_"; filename*=UTF-8''%3Csvg%20onload%3Dx%3E`,
	} {
		if got := blob.Disposition(key); got != want {
			t.Errorf("Disposition(%q) =\n %s\nwant\n %s", key, got, want)
		}
	}
	// The ASCII name is cut short; filename* keeps the exact name.
	long := "t/" + strings.Repeat("x", 250)
	want := `attachment; filename="` + strings.Repeat("x", 128) + `"; filename*=UTF-8''` + strings.Repeat("x", 250)
	if got := blob.Disposition(long); got != want {
		t.Errorf("Disposition of a long name = %s", got)
	}
}
