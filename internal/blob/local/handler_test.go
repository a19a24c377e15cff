package local

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/blob"
)

func newTestStore(t testing.TB) *Store {
	t.Helper()
	s, err := New(t.TempDir(), "https://corral.example/base/", bytes.Repeat([]byte{7}, MinSecretLen), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestExpiry moves the clock: a link works until its expiry second and is
// refused from then on.
func TestExpiry(t *testing.T) {
	s := newTestStore(t)
	now := time.Unix(1_800_000_000, 300_000_000)
	s.now = func() time.Time { return now }
	raw, exp, err := s.SignedURL(t.Context(), "a/b.txt", 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1_800_000_091, 0); !exp.Equal(want) {
		t.Errorf("expiry %v, want %v (rounded up)", exp, want)
	}
	if !strings.HasPrefix(raw, "https://corral.example/base/v1/blobs/a/b.txt?expires=1800000091&sig=") {
		t.Errorf("link %s", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = strings.TrimPrefix(u.Path, "/base")
	u.RawPath = ""
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{now, ""},
		{exp.Add(-time.Nanosecond), ""},
		{exp, "this download link has expired; ask for a new one"},
		{exp.Add(time.Hour), "this download link has expired; ask for a new one"},
	} {
		now = tc.at
		key, refusal := s.verify(u)
		if refusal != tc.want || (refusal == "" && key != "a/b.txt") {
			t.Errorf("at %v: verify = %q, %q; want refusal %q", tc.at, key, refusal, tc.want)
		}
	}
}

// FuzzVerify: whatever a client sends, a link is accepted only for a valid
// key with this store's signature over it and an expiry still ahead.
func FuzzVerify(f *testing.F) {
	s := newTestStore(f)
	s.now = func() time.Time { return time.Unix(1_800_000_000, 0) }
	for _, key := range []string{"a/b.txt", "t/odd/with space?&.txt", "ü/文"} {
		raw, _, err := s.SignedURL(f.Context(), key, time.Hour)
		if err != nil {
			f.Fatal(err)
		}
		u, _ := url.Parse(raw)
		f.Add(strings.TrimPrefix(u.EscapedPath(), "/base"), u.RawQuery)
	}
	f.Add("/v1/blobs/../x", "expires=1&sig=00")
	f.Add("/v1/blobs/a%2F..%2Fb", "expires=99999999999&sig=zz")
	f.Fuzz(func(t *testing.T, path, query string) {
		u := &url.URL{RawPath: path, RawQuery: query}
		p, err := url.PathUnescape(path)
		if err != nil {
			return
		}
		u.Path = p
		key, refusal := s.verify(u)
		if refusal != "" {
			return
		}
		if err := blob.ValidateKey(key); err != nil {
			t.Fatalf("accepted invalid key %q: %v", key, err)
		}
		q, _ := url.ParseQuery(query)
		exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
		if err != nil || exp <= s.now().Unix() {
			t.Fatalf("accepted expires=%q", q.Get("expires"))
		}
		want, _, _ := s.SignedURL(t.Context(), key, time.Duration(exp-s.now().Unix())*time.Second)
		if !strings.HasSuffix(want, "sig="+q.Get("sig")) {
			t.Fatalf("accepted a signature SignedURL does not make: %s?%s", path, query)
		}
	})
}
