// Package blob stores what outlives a sandbox — artifacts and session
// files — as objects under slash-separated keys, and hands out expiring
// download links for them. Implementations: local (a directory; the
// embedded default, whose links corral serves itself) and s3 (any
// S3-compatible object storage, presigned links); both pass blobtest.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors. Implementations wrap them, so test with errors.Is.
var (
	// ErrNotFound: no object under that key.
	ErrNotFound = errors.New("object not found")
	// ErrInvalid: a key, prefix, content type, size or TTL the store
	// refuses; the caller's input is at fault and nothing was changed.
	ErrInvalid = errors.New("invalid argument")
	// ErrSizeMismatch: Put was given a size and the reader yielded fewer
	// or more bytes; nothing was stored.
	ErrSizeMismatch = errors.New("size mismatch")
	// ErrConflict: the key is a directory of other keys, or one of its
	// parents is an object ("a" and "a/b"). File-system backed stores
	// cannot hold both; others may. Nothing was changed.
	ErrConflict = errors.New("key conflicts with another object")
)

// Limits on keys. 1,024 bytes is S3's limit; 255 bytes per segment is
// what a file name can hold.
const (
	MaxKeyLen     = 1024
	MaxSegmentLen = 255
)

// DefaultContentType is what Put stores when given no content type.
const DefaultContentType = "application/octet-stream"

// Object describes a stored object.
type Object struct {
	Key  string
	Size int64
	// ContentType is never empty for a stored object.
	ContentType string
	// SHA256 is the lowercase hex SHA-256 of the content, computed while
	// it was stored. It is empty for objects written by something other
	// than a Store, and, on S3, for a large object in the moment between
	// its upload and the copy that attaches it (see package s3).
	SHA256 string
	// ModTime is when the object was stored, as the backend records it
	// (S3 to the second). The Object Put returns may estimate it to within
	// that precision.
	ModTime time.Time
}

// Store is implemented by local.Store and s3.Store. Methods are safe for
// concurrent use and block at most until ctx ends (a local file system
// call in progress is not interrupted).
//
// Keys are slash-separated paths such as
// "tenant/executions/<id>/output/plot.png" (see ValidateKey); every method
// refuses an invalid key or prefix with ErrInvalid. A prefix is a plain
// string prefix, as in S3: "t/s1" also matches "t/s10/x", so callers that
// mean a directory end it with "/".
type Store interface {
	// Put stores what r yields under key, replacing any object there, and
	// returns what it stored. size is the exact length of r, or -1 when
	// unknown; a reader that ends early or runs past size fails with
	// ErrSizeMismatch. The content streams through a buffer of bounded
	// size whatever the object's size, and its SHA-256 is computed on the
	// way. contentType "" stores DefaultContentType; one that is not a
	// valid media type is ErrInvalid; a key that collides with a
	// directory of other keys may be ErrConflict. Put is atomic: readers
	// see the old object or the whole new one, and a Put that fails
	// (including when ctx ends) leaves no partial object behind.
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Object, error)
	// Get opens the object under key, or returns ErrNotFound. The caller
	// closes the reader; it reads the object as it was when Get returned
	// even if it is replaced meanwhile, and may fail once ctx ends.
	Get(ctx context.Context, key string) (io.ReadCloser, Object, error)
	// Stat describes the object under key, or returns ErrNotFound.
	Stat(ctx context.Context, key string) (Object, error)
	// Delete removes the object under key; a missing object is not an
	// error.
	Delete(ctx context.Context, key string) error
	// DeletePrefix removes every object whose key starts with prefix (a
	// session's files, an execution's artifacts). An empty prefix is
	// ErrInvalid: nothing deletes the whole store by accident. Objects
	// Put concurrently may survive.
	DeletePrefix(ctx context.Context, prefix string) error
	// List describes every object whose key starts with prefix ("" for
	// all), sorted by key in byte order.
	List(ctx context.Context, prefix string) ([]Object, error)
	// SignedURL returns an absolute URL that answers GET with the content
	// of key until the returned time, about ttl from now (rounded up to a
	// whole second), and is refused (403) after it. Anyone holding the URL
	// may download; changing its key, expiry or signature — to reach
	// another key or to extend it — makes it refused (403), and so does
	// any other change (403, or 400 where S3 finds the link malformed).
	// The object need not exist yet; a link to a missing object answers
	// 404. ttl must be between one second and MaxTTL, or it is ErrInvalid.
	SignedURL(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error)
	// Close releases the store's resources. Calls in progress may fail;
	// calls after Close fail.
	Close() error
}

// MaxTTL is the longest a signed URL may live: S3's limit for presigned
// URLs.
const MaxTTL = 7 * 24 * time.Hour

// ValidateKey returns nil for a key every Store accepts and ErrInvalid
// otherwise. A key is 1 to MaxKeyLen bytes of UTF-8 without control
// characters (NUL, newline, DEL, ...), made of segments separated by "/",
// each 1 to MaxSegmentLen bytes and neither "." nor "..". So a key is
// never absolute, never ends with "/", and never contains "//".
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("empty key: %w", ErrInvalid)
	}
	if err := validatePath(key); err != nil {
		return fmt.Errorf("key %q: %w", truncate(key), err)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if err := validateSegment(seg); err != nil {
			return fmt.Errorf("key %q: %w", truncate(key), err)
		}
	}
	return nil
}

// ValidatePrefix returns nil for a prefix List and DeletePrefix accept: ""
// or the beginning of a valid key. Every segment but the last follows
// ValidateKey's rules; the last may be empty (a prefix ending with "/") or
// any beginning of a segment.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := validatePath(prefix); err != nil {
		return fmt.Errorf("prefix %q: %w", truncate(prefix), err)
	}
	segs := strings.Split(prefix, "/")
	for _, seg := range segs[:len(segs)-1] {
		if err := validateSegment(seg); err != nil {
			return fmt.Errorf("prefix %q: %w", truncate(prefix), err)
		}
	}
	if len(segs[len(segs)-1]) > MaxSegmentLen {
		return fmt.Errorf("prefix %q: segment longer than %d bytes: %w", truncate(prefix), MaxSegmentLen, ErrInvalid)
	}
	return nil
}

// validatePath checks what keys and prefixes share: length, encoding,
// characters, not absolute.
func validatePath(p string) error {
	if len(p) > MaxKeyLen {
		return fmt.Errorf("longer than %d bytes: %w", MaxKeyLen, ErrInvalid)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("not valid UTF-8: %w", ErrInvalid)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("control character %U: %w", r, ErrInvalid)
		}
	}
	if p[0] == '/' {
		return fmt.Errorf("absolute: %w", ErrInvalid)
	}
	return nil
}

func validateSegment(seg string) error {
	switch {
	case seg == "":
		return fmt.Errorf("empty segment: %w", ErrInvalid)
	case seg == "." || seg == "..":
		return fmt.Errorf("%q segment: %w", seg, ErrInvalid)
	case len(seg) > MaxSegmentLen:
		return fmt.Errorf("segment longer than %d bytes: %w", MaxSegmentLen, ErrInvalid)
	}
	return nil
}

// truncate keeps error messages about hostile keys short.
func truncate(s string) string {
	const n = 128
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ContentType returns the content type Put stores for ct: ct itself, or
// DefaultContentType for "". A ct that is not a media type
// (mime.ParseMediaType), holds control characters or is longer than 256
// bytes is ErrInvalid, so it can be sent as a header as it is.
func ContentType(ct string) (string, error) {
	if ct == "" {
		return DefaultContentType, nil
	}
	if len(ct) > 256 {
		return "", fmt.Errorf("content type longer than 256 bytes: %w", ErrInvalid)
	}
	for i := 0; i < len(ct); i++ {
		if c := ct[i]; c < 0x20 || c >= 0x7f {
			return "", fmt.Errorf("content type %q: not printable ASCII: %w", truncate(ct), ErrInvalid)
		}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("content type %q: %v: %w", ct, err, ErrInvalid)
	}
	if typ, sub, _ := strings.Cut(mt, "/"); typ == "" || sub == "" {
		return "", fmt.Errorf("content type %q: want type/subtype: %w", ct, ErrInvalid)
	}
	return ct, nil
}

// CheckSize returns ErrInvalid unless size is -1 (unknown) or >= 0.
func CheckSize(size int64) error {
	if size < -1 {
		return fmt.Errorf("size %d: %w", size, ErrInvalid)
	}
	return nil
}

// CheckTTL returns ErrInvalid unless ttl is between a second and MaxTTL.
func CheckTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl > MaxTTL {
		return fmt.Errorf("ttl %v: want 1s to %v: %w", ttl, MaxTTL, ErrInvalid)
	}
	return nil
}

// HashReader is what a Store's Put reads from: it passes r through,
// computes the SHA-256 and length of what was read, and enforces the size
// Put was given. Not safe for concurrent use.
type HashReader struct {
	r    io.Reader
	size int64 // -1: unknown
	n    int64
	h    hash.Hash
	eof  bool  // r reported the end
	err  error // sticky: every later Read returns it
}

// NewHashReader reads r, which must yield exactly size bytes unless size
// is -1. A Read that would go past size, or meets the end of r before it,
// fails with ErrSizeMismatch; when the size-th byte has been read, that
// Read also checks that r ends there, so a consumer that stops after size
// bytes never stores an over-long object.
func NewHashReader(r io.Reader, size int64) *HashReader {
	return &HashReader{r: r, size: size, h: sha256.New()}
}

func (h *HashReader) Read(p []byte) (int, error) {
	if h.err != nil {
		return 0, h.err
	}
	if h.eof {
		return 0, io.EOF
	}
	if h.size >= 0 && h.n == h.size {
		if err := h.expectEnd(); err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	if h.size >= 0 && int64(len(p)) > h.size-h.n {
		p = p[:h.size-h.n]
	}
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	switch {
	case err == io.EOF:
		if h.size >= 0 && h.n < h.size {
			h.err = fmt.Errorf("reader ended after %d of %d bytes: %w", h.n, h.size, ErrSizeMismatch)
			return n, h.err
		}
		h.eof = true
		return n, io.EOF
	case err != nil:
		h.err = err
		return n, err
	}
	if h.size >= 0 && h.n == h.size && n > 0 {
		if err := h.expectEnd(); err != nil {
			return n, err
		}
		return n, io.EOF
	}
	return n, nil
}

// expectEnd checks that r has nothing after size bytes.
func (h *HashReader) expectEnd() error {
	var b [1]byte
	for range 100 {
		n, err := h.r.Read(b[:])
		if n > 0 {
			h.err = fmt.Errorf("reader has more than %d bytes: %w", h.size, ErrSizeMismatch)
			return h.err
		}
		if err == io.EOF {
			h.eof = true
			return nil
		}
		if err != nil {
			h.err = err
			return err
		}
	}
	h.err = io.ErrNoProgress
	return h.err
}

// Verify returns nil when the reader was read to its end and that end was
// at the promised size. A Store calls it before it commits an object; for
// size 0 it may call it before reading at all.
func (h *HashReader) Verify() error {
	if h.err != nil {
		return h.err
	}
	if h.size >= 0 && h.n == h.size && !h.eof {
		return h.expectEnd()
	}
	if !h.eof {
		return fmt.Errorf("object stored before its reader ended (%d bytes read)", h.n)
	}
	return nil
}

// N returns the number of bytes read so far.
func (h *HashReader) N() int64 { return h.n }

// Sum returns the lowercase hex SHA-256 of what was read so far.
func (h *HashReader) Sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// Disposition returns a Content-Disposition header that makes a browser
// save the object under key as a file named after its last segment: an
// ASCII-only filename (anything else becomes "_") and, when that differs,
// the exact name as RFC 5987 filename*.
func Disposition(key string) string {
	name := path.Base(key)
	var b strings.Builder
	for i, c := range name {
		if b.Len() >= 128 {
			break
		}
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.' && i > 0:
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	ascii := b.String()
	if ascii == "" {
		ascii = "download"
	}
	v := `attachment; filename="` + ascii + `"`
	if ascii != name && utf8.ValidString(name) {
		v += "; filename*=UTF-8''" + attrEscape(name)
	}
	return v
}

// attrEscape percent-encodes s as an RFC 5987 ext-value.
func attrEscape(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// DownloadHeaders sets the headers every download of o carries, wherever
// it is served from corral's origin: its type, a save-as-file disposition,
// and no way for an uploaded page (HTML, SVG) to run script or be sniffed
// into one on that origin.
func DownloadHeaders(h http.Header, o Object) {
	h.Set("Content-Type", o.ContentType)
	h.Set("Content-Disposition", Disposition(o.Key))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "private, no-store")
	if o.SHA256 != "" {
		h.Set("ETag", `"`+o.SHA256+`"`)
	}
}
