package s3_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/blobtest"
	"github.com/corralhq/corral/internal/blob/s3"
	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) { blobtest.Main(m, testenv.StopS3) }

func open(t *testing.T, rawURL string) *s3.Store {
	t.Helper()
	s, err := s3.Open(t.Context(), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestConformance runs the suite against a real S3-compatible server
// (versitygw unless $CORRAL_TEST_S3 names another), a bucket per test.
func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return open(t, testenv.S3(t)) })
}

// TestKeyPrefix: a store with a key prefix sees only its own keys, as if
// it had the bucket to itself.
func TestKeyPrefix(t *testing.T) {
	bucketURL := testenv.S3(t)
	u, err := url.Parse(bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	withPrefix := func(p string) string {
		v := *u
		v.Path += p
		return v.String()
	}
	a, b, whole := open(t, withPrefix("/deploy-a")), open(t, withPrefix("/deploy-b/")), open(t, bucketURL)
	for _, s := range []*s3.Store{a, b} {
		if _, err := s.Put(t.Context(), "t/x", strings.NewReader("x"), 1, ""); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := a.List(t.Context(), "")
	if err != nil || len(objs) != 1 || objs[0].Key != "t/x" {
		t.Errorf("List with a prefix: %v %v", objs, err)
	}
	if err := a.DeletePrefix(t.Context(), "t/"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(t.Context(), "t/x"); err != nil {
		t.Errorf("another prefix's DeletePrefix removed this one's object: %v", err)
	}
	objs, err = whole.List(t.Context(), "")
	if err != nil || len(objs) != 1 || objs[0].Key != "deploy-b/t/x" {
		t.Errorf("the bucket holds %v %v, want deploy-b/t/x", objs, err)
	}
}

// TestStoredForm: the SHA-256 is the object's x-amz-meta-sha256, where
// other S3 tools see it too, for single and multipart uploads alike; and a
// failed multipart Put leaves no unfinished upload behind.
func TestStoredForm(t *testing.T) {
	bucketURL := testenv.S3(t)
	s := open(t, bucketURL)
	cfg, err := s3.ParseURL(bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := minio.DefaultTransport(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	admin, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""), Region: cfg.Region,
		BucketLookup: minio.BucketLookupPath, Transport: tr,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, s3.DefaultPartSize + 1} {
		data := bytes.Repeat([]byte("z"), n)
		o, err := s.Put(t.Context(), "k/"+strconv.Itoa(n), onlyReader{bytes.NewReader(data)}, -1, "text/plain")
		if err != nil {
			t.Fatal(err)
		}
		info, err := admin.StatObject(t.Context(), cfg.Bucket, "k/"+strconv.Itoa(n), minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if got := info.Metadata.Get("X-Amz-Meta-Sha256"); got != hex.EncodeToString(sum[:]) || got != o.SHA256 {
			t.Errorf("%d bytes: x-amz-meta-sha256 %q, want %x", n, got, sum)
		}
		if info.ContentType != "text/plain" {
			t.Errorf("%d bytes: Content-Type %q", n, info.ContentType)
		}
	}
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(make([]byte, 2*s3.DefaultPartSize)), iotest.ErrReader(boom))
	if _, err := s.Put(t.Context(), "k/failed", r, -1, ""); !errors.Is(err, boom) {
		t.Fatalf("Put = %v, want boom", err)
	}
	for u := range admin.ListIncompleteUploads(t.Context(), cfg.Bucket, "", true) {
		t.Errorf("unfinished upload left: %+v", u)
	}
}

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestOpenRefuses(t *testing.T) {
	bucketURL := testenv.S3(t)
	u, _ := url.Parse(bucketURL)
	noBucket := *u
	noBucket.Path = "/corral-no-such-bucket"
	badKey := *u
	badKey.User = url.UserPassword("nobody", "wrong")
	for _, raw := range []string{noBucket.String(), badKey.String()} {
		if s, err := s3.Open(t.Context(), raw); err == nil {
			s.Close()
			t.Errorf("Open(%s) succeeded", raw)
		}
	}
}

func TestParseURL(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		url  string
		want s3.Config
	}{
		{"s3://AK:SK@127.0.0.1:9000/bucket?region=us-east-1&secure=false&path_style=true",
			s3.Config{Endpoint: "127.0.0.1:9000", AccessKey: "AK", SecretKey: "SK", Bucket: "bucket", Region: "us-east-1", PathStyle: &yes, PartSize: s3.DefaultPartSize}},
		{"s3://s3.amazonaws.com/corral-artifacts",
			s3.Config{Endpoint: "s3.amazonaws.com", Bucket: "corral-artifacts", Secure: true, PartSize: s3.DefaultPartSize}},
		{"s3://AK:s%2Fk%40%3A@host/b/deploy/one/?path_style=false&part_size=8388608",
			s3.Config{Endpoint: "host", AccessKey: "AK", SecretKey: "s/k@:", Bucket: "b", Prefix: "deploy/one/", Secure: true, PathStyle: &no, PartSize: 8 << 20}},
	}
	for _, tc := range tests {
		got, err := s3.ParseURL(tc.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("ParseURL(%q) (-want +got):\n%s", tc.url, d)
		}
	}
	for _, raw := range []string{
		"http://host/b",
		"s3:///b",
		"s3://host",
		"s3://host/",
		"s3://AK@host/b",
		"s3://host/b?secure=maybe",
		"s3://host/b?path_style=2",
		"s3://host/b?part_size=1024",
		"s3://host/b?part_size=99999999999",
		"s3://host/b?bogus=1",
		"s3://host/b?region=a&region=b",
		"s3://host/b/../x",
		"s3://host/b/x//y",
	} {
		if _, err := s3.ParseURL(raw); !errors.Is(err, blob.ErrInvalid) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalid", raw, err)
		}
	}
	// Errors never show the secret key.
	if _, err := s3.ParseURL("s3://AK:topsecret@host/b?bogus=1"); err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("error %v shows the secret", err)
	}
}
