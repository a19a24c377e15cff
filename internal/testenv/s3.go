package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/blob/s3"
)

// VersityGW is the S3-compatible server scripts/deps.sh builds
// (github.com/versity/versitygw, serving a local directory).
const VersityGW = PinnedDir + "/bin/versitygw"

// S3Env names an S3-compatible server that S3 uses instead of starting
// its own: an s3:// URL as blob/s3 reads it, whose credentials may create
// buckets; its bucket part, if any, is ignored.
const S3Env = "CORRAL_TEST_S3"

var s3Srv struct {
	once sync.Once
	url  string
	err  error
	dir  string
	cmd  *exec.Cmd
	// exited is closed when cmd has been waited for.
	exited chan struct{}
}

// S3 returns an s3:// URL (see package blob/s3) naming a new, empty bucket
// for t, emptied and removed when t ends. The server is $CORRAL_TEST_S3
// when set, otherwise a versitygw over a temporary directory that this
// test process starts on first use; test mains stop it with StopS3.
func S3(t testing.TB) string {
	t.Helper()
	base := os.Getenv(S3Env)
	if base == "" {
		_, err := os.Stat(VersityGW)
		Need(t, err == nil, VersityGW+" missing: run scripts/deps.sh")
		s3Srv.once.Do(startS3)
		if s3Srv.err != nil {
			t.Fatalf("start versitygw: %v", s3Srv.err)
		}
		base = s3Srv.url
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", S3Env, err)
	}
	b := make([]byte, 8)
	rand.Read(b)
	bucket := "corral-test-" + hex.EncodeToString(b)
	u.Path = "/" + bucket
	bucketURL := u.String()

	client, cfg, done, err := s3Admin(bucketURL)
	if err != nil {
		t.Fatalf("%s: %v", S3Env, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: cfg.Region})
	done()
	if err != nil {
		t.Fatalf("create test bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() {
		defer done()
		if err := removeBucket(client, bucket); err != nil {
			t.Errorf("remove test bucket %s: %v", bucket, err)
		}
	})
	return bucketURL
}

// s3Admin returns a client for the server a blob/s3 URL names, and a
// function that closes its idle connections (and so their goroutines,
// which the suites' leak checks would count).
func s3Admin(rawURL string) (*minio.Client, s3.Config, func(), error) {
	cfg, err := s3.ParseURL(rawURL)
	if err != nil {
		return nil, cfg, nil, err
	}
	tr, err := minio.DefaultTransport(cfg.Secure)
	if err != nil {
		return nil, cfg, nil, err
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle != nil && *cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    tr,
	})
	return c, cfg, tr.CloseIdleConnections, err
}

// removeBucket removes every object and unfinished upload of bucket, then
// the bucket.
func removeBucket(c *minio.Client, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var errs []error
	for u := range c.ListIncompleteUploads(ctx, bucket, "", true) {
		if u.Err != nil {
			errs = append(errs, u.Err)
			break
		}
		errs = append(errs, c.RemoveIncompleteUpload(ctx, bucket, u.Key))
	}
	objs := c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
	for e := range c.RemoveObjects(ctx, bucket, objs, minio.RemoveObjectsOptions{}) {
		errs = append(errs, fmt.Errorf("%s: %w", e.ObjectName, e.Err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.RemoveBucket(ctx, bucket)
}

// startS3 starts the throwaway server, retrying on another port if the
// free one it picked was taken meanwhile.
func startS3() {
	dir, err := os.MkdirTemp("", "corral-test-s3-")
	if err != nil {
		s3Srv.err = err
		return
	}
	s3Srv.dir = dir
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		s3Srv.err = err
		return
	}
	backend := []string{"posix"}
	// versitygw keeps metadata in extended attributes, or in a sidecar
	// directory where the file system has none (tmpfs before Linux 6.6).
	if unix.Setxattr(data, "user.corral.probe", []byte("1"), 0) != nil {
		meta := filepath.Join(dir, "meta")
		if err := os.Mkdir(meta, 0o700); err != nil {
			s3Srv.err = err
			return
		}
		backend = append(backend, "--sidecar", meta)
	}
	backend = append(backend, data)
	var errs []error
	for range 3 {
		if err := tryS3(dir, backend); err != nil {
			errs = append(errs, err)
			continue
		}
		return
	}
	s3Srv.err = errors.Join(errs...)
}

func tryS3(dir string, backend []string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	access, secret := "corral"+strings.ToLower(rand.Text()[:10]), rand.Text()
	logPath := filepath.Join(dir, "versitygw-"+port+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"--access", access, "--secret", secret,
		"--port", "127.0.0.1:" + port, "--quiet"}, backend...)
	cmd := exec.Command(VersityGW, args...)
	cmd.Dir = dir
	// Only our flags configure it, not a VGW_* variable of the caller's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGW_") && !strings.HasPrefix(kv, "ROOT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the thread that started it; Go keeps threads of
	// unlocked goroutines alive for the life of the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	serverURL := "s3://" + access + ":" + secret + "@127.0.0.1:" + port +
		"/?region=us-east-1&secure=false&path_style=true"
	if err := waitS3(serverURL, exited); err != nil {
		cmd.Process.Kill()
		<-exited
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("port %s: %w\n%s", port, err, out)
	}
	s3Srv.cmd, s3Srv.exited, s3Srv.url = cmd, exited, serverURL
	return nil
}

// waitS3 polls until the server lists buckets, exits, or 15 s pass.
func waitS3(serverURL string, exited <-chan struct{}) error {
	u, _ := url.Parse(serverURL)
	u.Path = "/probe"
	c, _, done, err := s3Admin(u.String())
	if err != nil {
		return err
	}
	defer done()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ListBuckets(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to ListBuckets: %w", err)
		}
		select {
		case <-exited:
			return errors.New("versitygw exited")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StopS3 kills the server S3 started, if any, and removes its directory;
// call it from TestMain after m.Run.
func StopS3() {
	if s3Srv.cmd != nil {
		s3Srv.cmd.Process.Kill()
		<-s3Srv.exited
		s3Srv.cmd = nil
	}
	if s3Srv.dir != "" {
		os.RemoveAll(s3Srv.dir)
		s3Srv.dir = ""
	}
}
