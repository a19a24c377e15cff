// Package s3 stores blobs in a bucket of any S3-compatible object storage
// (AWS S3, MinIO, Ceph RGW, versitygw, ...) through minio-go; its links are
// presigned GET URLs the storage serves itself.
//
// The configuration is one URL:
//
//	s3://ACCESS_KEY:SECRET_KEY@HOST[:PORT]/BUCKET[/KEY/PREFIX]?OPTIONS
//
// ACCESS_KEY and SECRET_KEY are percent-encoded where needed; without
// them the credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
// (or MINIO_ACCESS_KEY/MINIO_SECRET_KEY), else from the instance's IAM
// role. BUCKET must exist. A path after it puts every key under that
// prefix, so deployments can share a bucket. OPTIONS:
//
//	region=us-east-1     the bucket's region; asked of the server when unset
//	secure=false         plain http (default true: https)
//	path_style=true      http://host/bucket/key addressing (default: chosen
//	                     by host, virtual-host style for AWS); false forces
//	                     virtual-host style
//	part_size=16777216   multipart part size in bytes, 5 MiB to 1 GiB
//	                     (default 16 MiB); also the largest single PUT
//
// Example: s3://minio:minio123@127.0.0.1:9000/corral?secure=false&path_style=true
//
// Memory: a Put holds one part buffer (part_size) at a time whatever the
// object's size (with the garbage the HTTP client makes, the heap grows by
// about twice that: 32 MiB measured for 256 MiB at 16 MiB parts). Objects
// up to part_size are one PUT whose SHA-256 is sent with it (the server
// checks it) and stored as the x-amz-meta-sha256 user metadata. Larger or
// unknown-size objects are multipart uploads, parts sent one after
// another, each with its own SHA-256; since S3 metadata is fixed when an
// upload starts, the object's SHA-256 is then attached by a server-side
// copy onto itself, which costs the server one more pass over the data
// but no memory here (in between, Stat shows the object without it). An
// upload that fails is aborted; one a crash cut short is the bucket's to
// expire (an AbortIncompleteMultipartUpload lifecycle rule). An object may
// have at most 10,000 parts (160 GiB at the default part size).
package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corralhq/corral/internal/blob"
)

// Part sizes (S3's limits are 5 MiB to 5 GiB; we cap lower because a part
// is held in memory).
const (
	DefaultPartSize = 16 << 20
	MinPartSize     = 5 << 20
	MaxPartSize     = 1 << 30
	maxParts        = 10000
)

// metaSHA256 is the user metadata (x-amz-meta-sha256) that holds an
// object's SHA-256.
const metaSHA256 = "sha256"

// statWorkers bounds the HEAD requests List sends at once.
const statWorkers = 8

// Config is what a configuration URL says.
type Config struct {
	Endpoint  string // host[:port]
	AccessKey string
	SecretKey string
	Bucket    string
	// Prefix is prepended to every key; "" or ending with "/".
	Prefix    string
	Region    string
	Secure    bool
	PathStyle *bool // nil: chosen by host
	PartSize  int64
}

// ParseURL reads a configuration URL (see the package documentation).
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("s3 URL: %v: %w", err, blob.ErrInvalid)
	}
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("s3 URL %s: %s: %w", u.Redacted(), fmt.Sprintf(format, args...), blob.ErrInvalid)
	}
	if u.Scheme != "s3" {
		return bad("scheme %q, want s3://", u.Scheme)
	}
	if u.Host == "" {
		return bad("no host")
	}
	if u.Fragment != "" || u.Opaque != "" {
		return bad("unexpected fragment or opaque part")
	}
	c := Config{Endpoint: u.Host, Secure: true, PartSize: DefaultPartSize}
	if u.User != nil {
		c.AccessKey = u.User.Username()
		c.SecretKey, _ = u.User.Password()
		if c.AccessKey == "" || c.SecretKey == "" {
			return bad("credentials need both ACCESS_KEY and SECRET_KEY")
		}
	}
	p := strings.TrimPrefix(u.Path, "/")
	c.Bucket, c.Prefix, _ = strings.Cut(p, "/")
	if c.Bucket == "" {
		return bad("no bucket")
	}
	if c.Prefix != "" {
		c.Prefix = strings.TrimSuffix(c.Prefix, "/") + "/"
		if err := blob.ValidateKey(strings.TrimSuffix(c.Prefix, "/")); err != nil {
			return bad("key prefix: %v", err)
		}
	}
	for k, vs := range u.Query() {
		if len(vs) != 1 {
			return bad("option %s given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "region":
			c.Region = v
		case "secure":
			if c.Secure, err = strconv.ParseBool(v); err != nil {
				return bad("secure=%q: want true or false", v)
			}
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("path_style=%q: want true or false", v)
			}
			c.PathStyle = &b
		case "part_size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < MinPartSize || n > MaxPartSize {
				return bad("part_size=%q: want bytes, %d to %d", v, MinPartSize, MaxPartSize)
			}
			c.PartSize = n
		default:
			return bad("unknown option %q (known: region, secure, path_style, part_size)", k)
		}
	}
	return c, nil
}

// Store keeps objects in one bucket. It is safe for concurrent use.
type Store struct {
	client    *minio.Client
	core      minio.Core
	transport *http.Transport
	bucket    string
	prefix    string
	partSize  int64
	// parts recycles part buffers between Puts.
	parts  sync.Pool
	closed atomic.Bool
}

// Open connects to the bucket a configuration URL names and checks that
// it exists and the credentials reach it.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	c, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return New(ctx, c)
}

// New is Open from a parsed Config.
func New(ctx context.Context, c Config) (*Store, error) {
	tr, err := minio.DefaultTransport(c.Secure)
	if err != nil {
		return nil, fmt.Errorf("s3 transport: %w", err)
	}
	creds := credentials.NewStaticV4(c.AccessKey, c.SecretKey, "")
	if c.AccessKey == "" {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.IAM{},
		})
	}
	lookup := minio.BucketLookupAuto
	if c.PathStyle != nil {
		lookup = minio.BucketLookupDNS
		if *c.PathStyle {
			lookup = minio.BucketLookupPath
		}
	}
	client, err := minio.New(c.Endpoint, &minio.Options{
		Creds:        creds,
		Secure:       c.Secure,
		Region:       c.Region,
		BucketLookup: lookup,
		Transport:    tr,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client: %w", err)
	}
	partSize := c.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	s := &Store{
		client:    client,
		core:      minio.Core{Client: client},
		transport: tr,
		bucket:    c.Bucket,
		prefix:    c.Prefix,
		partSize:  partSize,
	}
	s.parts.New = func() any { b := make([]byte, s.partSize); return &b }
	ok, err := client.BucketExists(ctx, c.Bucket)
	if err == nil && !ok {
		err = errors.New("no such bucket")
	}
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("s3 bucket %s at %s: %w", c.Bucket, c.Endpoint, err)
	}
	return s, nil
}

// Close closes idle connections; later calls fail.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.transport.CloseIdleConnections()
	return nil
}

var errClosed = errors.New("blob store closed")

// objectKey checks key and returns it with the store's prefix.
func (s *Store) objectKey(key string) (string, error) {
	if s.closed.Load() {
		return "", errClosed
	}
	if err := blob.ValidateKey(key); err != nil {
		return "", err
	}
	if len(s.prefix)+len(key) > blob.MaxKeyLen {
		return "", fmt.Errorf("key %q: longer than %d bytes with the store's prefix: %w", key, blob.MaxKeyLen, blob.ErrInvalid)
	}
	return s.prefix + key, nil
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (blob.Object, error) {
	ok, err := s.objectKey(key)
	if err != nil {
		return blob.Object{}, err
	}
	ct, err := blob.ContentType(contentType)
	if err != nil {
		return blob.Object{}, err
	}
	if err := blob.CheckSize(size); err != nil {
		return blob.Object{}, err
	}
	hr := blob.NewHashReader(r, size)
	if size >= 0 && size < s.partSize {
		// Known to fit one PUT: no need for a whole part buffer.
		data := make([]byte, size)
		if _, err := io.ReadFull(hr, data); err != nil {
			return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
		}
		return s.putSingle(ctx, key, ok, hr, data, ct)
	}
	bp := s.parts.Get().(*[]byte)
	defer s.parts.Put(bp)
	buf := *bp
	n, err := io.ReadFull(hr, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return s.putSingle(ctx, key, ok, hr, buf[:n], ct)
	case err != nil:
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	return s.putMultipart(ctx, key, ok, hr, buf, ct)
}

// putSingle stores data, all of hr, with one PUT.
func (s *Store) putSingle(ctx context.Context, key, ok string, hr *blob.HashReader, data []byte, ct string) (blob.Object, error) {
	if err := hr.Verify(); err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	sum := hr.Sum()
	info, err := s.core.PutObject(ctx, s.bucket, ok, bytes.NewReader(data), int64(len(data)), "", sum,
		minio.PutObjectOptions{ContentType: ct, UserMetadata: map[string]string{metaSHA256: sum}})
	if err != nil {
		return blob.Object{}, s.mapErr("put", key, err)
	}
	return blob.Object{Key: key, Size: int64(len(data)), ContentType: ct, SHA256: sum, ModTime: s.modTime(ctx, ok, info.ETag)}, nil
}

// modTime is when the backend says it stored the object ok with etag: a
// PUT's answer does not say, and an upload slow enough makes the time it
// ended a poor estimate. If ok has been replaced meanwhile, or cannot be
// asked about, the estimate is all there is.
func (s *Store) modTime(ctx context.Context, ok, etag string) time.Time {
	info, err := s.client.StatObject(ctx, s.bucket, ok, minio.StatObjectOptions{})
	if err != nil || info.ETag != etag || info.LastModified.IsZero() {
		return time.Now()
	}
	return info.LastModified
}

// putMultipart uploads hr in parts through buf, which holds the first
// (full) part, then attaches the SHA-256 by a copy onto itself.
func (s *Store) putMultipart(ctx context.Context, key, ok string, hr *blob.HashReader, buf []byte, ct string) (_ blob.Object, err error) {
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, ok, minio.PutObjectOptions{ContentType: ct})
	if err != nil {
		return blob.Object{}, s.mapErr("put", key, err)
	}
	completed := false
	defer func() {
		if completed {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if aerr := s.core.AbortMultipartUpload(actx, s.bucket, ok, id); aerr != nil {
			err = errors.Join(err, fmt.Errorf("abort upload of %s: %w", key, aerr))
		}
	}()
	var parts []minio.CompletePart
	n := len(buf)
	for {
		if len(parts) == maxParts {
			return blob.Object{}, fmt.Errorf("put %s: more than %d parts of %d bytes: %w", key, maxParts, s.partSize, blob.ErrInvalid)
		}
		partSum := sha256.Sum256(buf[:n])
		p, err := s.core.PutObjectPart(ctx, s.bucket, ok, id, len(parts)+1,
			bytes.NewReader(buf[:n]), int64(n), minio.PutObjectPartOptions{Sha256Hex: hex.EncodeToString(partSum[:])})
		if err != nil {
			return blob.Object{}, s.mapErr("put", key, err)
		}
		parts = append(parts, minio.CompletePart{PartNumber: p.PartNumber, ETag: p.ETag})
		n, err = io.ReadFull(hr, buf)
		if err == io.EOF {
			break
		}
		if err != nil && err != io.ErrUnexpectedEOF {
			return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
		}
	}
	if err := hr.Verify(); err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	info, err := s.core.CompleteMultipartUpload(ctx, s.bucket, ok, id, parts, minio.PutObjectOptions{ContentType: ct})
	if err != nil {
		return blob.Object{}, s.mapErr("put", key, err)
	}
	completed = true
	sum := hr.Sum()
	composed, err := s.client.ComposeObject(ctx,
		minio.CopyDestOptions{
			Bucket: s.bucket, Object: ok,
			ReplaceMetadata: true,
			// Content-Type among the metadata too: a copy of more than
			// 5 GiB is a multipart copy, which takes it only from there.
			UserMetadata: map[string]string{metaSHA256: sum, "Content-Type": ct},
			ContentType:  ct,
		},
		minio.CopySrcOptions{Bucket: s.bucket, Object: ok, MatchETag: info.ETag})
	if err != nil && minio.ToErrorResponse(err).Code != "PreconditionFailed" {
		// Leave no object without its SHA-256.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = s.mapErr("put", key, err)
		if derr := s.client.RemoveObject(dctx, s.bucket, ok, minio.RemoveObjectOptions{}); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", key, derr))
		}
		return blob.Object{}, err
	}
	// PreconditionFailed: another Put replaced the object meanwhile; it
	// sets its own metadata, and ours counts as overwritten.
	mod := composed.LastModified
	if err != nil || mod.IsZero() {
		mod = time.Now()
	}
	return blob.Object{Key: key, Size: hr.N(), ContentType: ct, SHA256: sum, ModTime: mod}, nil
}

// Get implements blob.Store. Reading may fail once ctx ends.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Object, error) {
	ok, err := s.objectKey(key)
	if err != nil {
		return nil, blob.Object{}, err
	}
	o, err := s.client.GetObject(ctx, s.bucket, ok, minio.GetObjectOptions{})
	if err != nil {
		return nil, blob.Object{}, s.mapErr("get", key, err)
	}
	info, err := o.Stat() // sends the GET
	if err != nil {
		o.Close()
		return nil, blob.Object{}, s.mapErr("get", key, err)
	}
	return o, toObject(key, info), nil
}

// Stat implements blob.Store.
func (s *Store) Stat(ctx context.Context, key string) (blob.Object, error) {
	ok, err := s.objectKey(key)
	if err != nil {
		return blob.Object{}, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, ok, minio.StatObjectOptions{})
	if err != nil {
		return blob.Object{}, s.mapErr("stat", key, err)
	}
	return toObject(key, info), nil
}

func toObject(key string, info minio.ObjectInfo) blob.Object {
	o := blob.Object{Key: key, Size: info.Size, ContentType: info.ContentType, ModTime: info.LastModified}
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, metaSHA256) {
			o.SHA256 = v
		}
	}
	if o.ContentType == "" {
		o.ContentType = blob.DefaultContentType
	}
	return o
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	ok, err := s.objectKey(key)
	if err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, ok, minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(s.mapErr("delete", key, err), blob.ErrNotFound) {
			return nil
		}
		return s.mapErr("delete", key, err)
	}
	return nil
}

// keys lists the keys (with the store's prefix) under prefix.
func (s *Store) keys(ctx context.Context, prefix string) ([]string, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the listing goroutine if we stop early
	var keys []string
	for info := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if info.Err != nil {
			return nil, s.mapErr("list", prefix, info.Err)
		}
		// Directory markers some servers list; never a key of ours.
		if strings.HasSuffix(info.Key, "/") {
			continue
		}
		keys = append(keys, info.Key)
	}
	slices.Sort(keys)
	return keys, nil
}

// List implements blob.Store. S3 listings carry neither content type nor
// user metadata, so each object is asked for with a HEAD (a few at once).
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Object, error) {
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	objs := make([]blob.Object, len(keys))
	found := make([]bool, len(keys))
	errs := make([]error, len(keys))
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(statWorkers, len(keys)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) || ctx.Err() != nil {
					return
				}
				info, err := s.client.StatObject(ctx, s.bucket, keys[i], minio.StatObjectOptions{})
				if err != nil {
					if err = s.mapErr("list", keys[i], err); !errors.Is(err, blob.ErrNotFound) {
						errs[i] = err // else deleted meanwhile: skip it
					}
					continue
				}
				objs[i], found[i] = toObject(strings.TrimPrefix(keys[i], s.prefix), info), true
			}
		})
	}
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return nil, err
	}
	out := objs[:0]
	for i, o := range objs {
		if found[i] {
			out = append(out, o)
		}
	}
	return out, nil
}

// DeletePrefix implements blob.Store, with multi-object deletes of up to
// 1,000 keys a request.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return fmt.Errorf("delete everything: empty prefix: %w", blob.ErrInvalid)
	}
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return err
	}
	ch := make(chan minio.ObjectInfo)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(ch)
		for _, k := range keys {
			select {
			case ch <- minio.ObjectInfo{Key: k}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var errs []error
	for e := range s.client.RemoveObjects(ctx, s.bucket, ch, minio.RemoveObjectsOptions{}) {
		if e.Err != nil && !errors.Is(s.mapErr("delete", e.ObjectName, e.Err), blob.ErrNotFound) {
			errs = append(errs, s.mapErr("delete", e.ObjectName, e.Err))
		}
	}
	errs = append(errs, ctx.Err())
	return errors.Join(errs...)
}

// SignedURL implements blob.Store with a presigned GET (AWS Signature V4
// in the query) that also makes the download a file named after the key
// (response-content-disposition). The expiry is the one signed into the
// URL: X-Amz-Date + X-Amz-Expires.
func (s *Store) SignedURL(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	ok, err := s.objectKey(key)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := blob.CheckTTL(ttl); err != nil {
		return "", time.Time{}, err
	}
	ttl = (ttl + time.Second - 1).Truncate(time.Second)
	params := url.Values{"response-content-disposition": {blob.Disposition(key)}}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, ok, ttl, params)
	if err != nil {
		return "", time.Time{}, s.mapErr("sign", key, err)
	}
	signed, err := time.Parse("20060102T150405Z", u.Query().Get("X-Amz-Date"))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign %s: presigned URL without X-Amz-Date: %w", key, err)
	}
	return u.String(), signed.Add(ttl).Local(), nil
}

// mapErr wraps err, turning the storage's error codes into blob's.
func (s *Store) mapErr(op, key string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey", "NotFound":
		return fmt.Errorf("%s %s: %w", op, key, blob.ErrNotFound)
	case "ObjectParentIsFile", "ExistingObjectIsDirectory", // versitygw
		"XMinioParentIsObject", "XMinioObjectExistsAsDirectory": // MinIO
		return fmt.Errorf("%s %s: %w", op, key, blob.ErrConflict)
	case "NoSuchBucket":
		return fmt.Errorf("%s %s: bucket %s: %w", op, key, s.bucket, err)
	}
	if resp.StatusCode == http.StatusNotFound && resp.Code == "" {
		return fmt.Errorf("%s %s: %w", op, key, blob.ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}

var _ blob.Store = (*Store)(nil)
