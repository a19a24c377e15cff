package local_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/blobtest"
	"github.com/corralhq/corral/internal/blob/local"
)

func TestMain(m *testing.M) { blobtest.Main(m) }

var secret = bytes.Repeat([]byte("k"), local.MinSecretLen)

// serve opens a Store in dir whose links point at a test server that
// mounts its Handler at /v1/blobs/, as corral serve does.
func serve(t *testing.T, dir string) *local.Store {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s, err := local.New(dir, srv.URL, secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	mux.Handle(local.PathPrefix, s.Handler())
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return serve(t, t.TempDir()) })
}

func get(t *testing.T, method, u string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestDownloadHeaders: an uploaded page is a download, never a page that
// runs on corral's origin.
func TestDownloadHeaders(t *testing.T) {
	s := serve(t, t.TempDir())
	const page = "<html><script>fetch('/v1/executions')</script></html>"
	tests := []struct {
		key, disposition string
	}{
		{"acme/executions/e/output/index.html", `attachment; filename="index.html"`},
		{"acme/executions/e/output/ré sumé\".html", `attachment; filename="r__sum__.html"; filename*=UTF-8''r%C3%A9%20sum%C3%A9%22.html`},
		{"acme/executions/e/output/.env", `attachment; filename="_env"; filename*=UTF-8''.env`},
	}
	for _, tc := range tests {
		o, err := s.Put(t.Context(), tc.key, strings.NewReader(page), int64(len(page)), "text/html; charset=utf-8")
		if err != nil {
			t.Fatal(err)
		}
		u, _, err := s.SignedURL(t.Context(), tc.key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			resp, body := get(t, method, u)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %s", method, resp.Status)
			}
			want := map[string]string{
				"Content-Type":            "text/html; charset=utf-8",
				"Content-Length":          "53",
				"Content-Disposition":     tc.disposition,
				"X-Content-Type-Options":  "nosniff",
				"Content-Security-Policy": "default-src 'none'; sandbox",
				"Referrer-Policy":         "no-referrer",
				"Etag":                    `"` + o.SHA256 + `"`,
			}
			for h, v := range want {
				if got := resp.Header.Get(h); got != v {
					t.Errorf("%s %s: %s = %q, want %q", method, tc.key, h, got, v)
				}
			}
			if method == http.MethodHead && len(body) != 0 {
				t.Errorf("HEAD answered a body of %d bytes", len(body))
			}
			if method == http.MethodGet && string(body) != page {
				t.Errorf("GET body %q", body)
			}
		}
	}
}

func TestRange(t *testing.T) {
	s := serve(t, t.TempDir())
	if _, err := s.Put(t.Context(), "k/r", strings.NewReader("0123456789"), 10, "text/plain"); err != nil {
		t.Fatal(err)
	}
	u, _, err := s.SignedURL(t.Context(), "k/r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, http.MethodGet, u, "Range", "bytes=2-4")
	if resp.StatusCode != http.StatusPartialContent || string(body) != "234" {
		t.Errorf("Range: %s %q", resp.Status, body)
	}
}

// TestErrorAnswers: refusals are JSON errors with the codes the API uses.
func TestErrorAnswers(t *testing.T) {
	s := serve(t, t.TempDir())
	if _, err := s.Put(t.Context(), "k/x", strings.NewReader("x"), 1, ""); err != nil {
		t.Fatal(err)
	}
	good, _, err := s.SignedURL(t.Context(), "k/x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	missing, _, err := s.SignedURL(t.Context(), "k/missing", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, url string
		status      int
		code        string
	}{
		{http.MethodGet, strings.Replace(good, "sig=", "sig=0", 1), 403, "forbidden"},
		{http.MethodGet, strings.Replace(good, "/k/x", "/k/y", 1), 403, "forbidden"},
		{http.MethodGet, good[:strings.Index(good, "?")], 403, "forbidden"},
		{http.MethodGet, good + "&sig=00", 403, "forbidden"},
		{http.MethodGet, withQuery(good, "sig", ""), 403, "forbidden"},
		{http.MethodGet, withQuery(good, "sig", "-"), 403, "forbidden"},
		{http.MethodGet, withQuery(good, "expires", ""), 403, "forbidden"},
		{http.MethodGet, withQuery(good, "expires", "-"), 403, "forbidden"},
		{http.MethodGet, strings.Replace(good, "/k/x", "/k/x%00", 1), 403, "forbidden"},
		{http.MethodGet, missing, 404, "not_found"},
		{http.MethodPost, good, 405, "method_not_allowed"},
		{http.MethodPut, good, 405, "method_not_allowed"},
		{http.MethodDelete, good, 405, "method_not_allowed"},
	}
	for _, tc := range tests {
		resp, body := get(t, tc.method, tc.url)
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("%s %s: body %q: %v", tc.method, tc.url, body, err)
		}
		if resp.StatusCode != tc.status || e.Error.Code != tc.code || e.Error.Message == "" {
			t.Errorf("%s %s: %s %+v, want %d %s", tc.method, tc.url, resp.Status, e, tc.status, tc.code)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.url, ct)
		}
	}
	if _, err := s.Stat(t.Context(), "k/x"); err != nil {
		t.Errorf("a refused DELETE changed the object: %v", err)
	}
}

// withQuery sets (or, for "-", removes) a query parameter of raw.
func withQuery(raw, name, val string) string {
	u, _ := url.Parse(raw)
	q := u.Query()
	if val == "-" {
		q.Del(name)
	} else {
		q.Set(name, val)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestSecretKept: with no secret given, links outlive a restart.
func TestSecretKept(t *testing.T) {
	dir := t.TempDir()
	s, err := local.New(dir, "http://127.0.0.1:1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	u1, exp, err := s.SignedURL(t.Context(), "k/x", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	fi, err := os.Stat(filepath.Join(dir, "secret"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() < local.MinSecretLen {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	s, err = local.New(dir, "http://127.0.0.1:1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The same key and expiry sign the same way after the restart.
	u2, exp2, err := s.SignedURL(t.Context(), "k/x", time.Until(exp))
	if err != nil {
		t.Fatal(err)
	}
	if exp2.Equal(exp) && u1 != u2 {
		t.Errorf("links differ after a restart:\n%s\n%s", u1, u2)
	}
}

func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		base   string
		secret []byte
	}{
		{"http://x", []byte("short")},
		{"ftp://x", secret},
		{"x", secret},
		{"http://x?q=1", secret},
		{"http://user:pw@x", secret},
		{"", secret},
	} {
		if s, err := local.New(dir, tc.base, tc.secret, nil); !errors.Is(err, blob.ErrInvalid) {
			if s != nil {
				s.Close()
			}
			t.Errorf("New(%q, %d-byte secret) = %v, want ErrInvalid", tc.base, len(tc.secret), err)
		}
	}
}

// TestOneStorePerDir: a second Store on the same directory is refused
// while the first is open, so neither clears the other's Puts.
func TestOneStorePerDir(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, dir)
	if s2, err := local.New(dir, "http://x", secret, nil); err == nil {
		s2.Close()
		t.Fatal("a second Store opened the same directory")
	}
	s.Close()
	s2, err := local.New(dir, "http://x", secret, nil)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	s2.Close()
}

// TestLayout: objects are plain files with their metadata in extended
// attributes; a crashed Put's leftovers are cleared on open; deletes
// leave no empty directories behind.
func TestLayout(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tmp", "leftover"), []byte("half a put"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "tmp", "leftover")); !os.IsNotExist(err) {
		t.Errorf("leftover of a crashed Put still there: %v", err)
	}
	o, err := s.Put(t.Context(), "acme/executions/e1/output/sub/a.csv", strings.NewReader("a,b\n"), 4, "text/csv")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "objects", "acme/executions/e1/output/sub/a.csv")
	if b, err := os.ReadFile(p); err != nil || string(b) != "a,b\n" {
		t.Errorf("object file: %q %v", b, err)
	}
	buf := make([]byte, 128)
	n, err := unix.Getxattr(p, "user.corral.sha256", buf)
	if err != nil || string(buf[:n]) != o.SHA256 {
		t.Errorf("sha256 attribute %q %v, want %s", buf[:n], err, o.SHA256)
	}
	n, err = unix.Getxattr(p, "user.corral.content_type", buf)
	if err != nil || string(buf[:n]) != "text/csv" {
		t.Errorf("content type attribute %q %v", buf[:n], err)
	}
	if err := s.Delete(t.Context(), o.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "acme/sessions/s/files/x", strings.NewReader("x"), 1, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePrefix(t.Context(), "acme/sessions/"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "objects"))
	if err != nil || len(entries) != 0 {
		t.Errorf("objects/ after deleting everything: %v %v", entries, err)
	}
	entries, err = os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil || len(entries) != 0 {
		t.Errorf("tmp/ after Puts: %v %v", entries, err)
	}
}
