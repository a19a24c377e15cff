// Package local is the embedded blob store: objects are files under a
// directory, their content type and SHA-256 in extended attributes, and
// corral serves their signed download links itself (Handler).
//
// Layout of the directory:
//
//	objects/<key>   one regular file per object; written under tmp/ and
//	                renamed into place, so readers never see part of one
//	tmp/            Puts in progress; emptied when a Store opens it
//	secret          the link-signing key, when New generated it
//	lock            held (flock) by the one Store using the directory
package local

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/blob"
)

// PathPrefix is the path under which SignedURL links and Handler serves
// them: <baseURL>/v1/blobs/<escaped key>?expires=<unix>&sig=<hex>.
const PathPrefix = "/v1/blobs/"

// MinSecretLen is the shortest link-signing secret New accepts.
const MinSecretLen = 32

const (
	objectsDir = "objects"
	tmpDir     = "tmp"
	secretFile = "secret"
	lockFile   = "lock"

	xattrContentType = "user.corral.content_type"
	xattrSHA256      = "user.corral.sha256"
)

// Store keeps objects under a directory. It is safe for concurrent use;
// only one Store (in any process) uses a directory at a time.
type Store struct {
	root    *os.Root
	lock    *os.File
	baseURL string // without a trailing slash
	secret  []byte
	log     *slog.Logger
	// now is the clock links are signed and checked with; tests move it.
	now       func() time.Time
	closeOnce sync.Once
}

// New opens (creating it if needed) the store in dir. Its links are
// baseURL (an absolute http or https URL, e.g. "https://corral.example")
// followed by PathPrefix, and are signed with HMAC-SHA256 under secret,
// which must be at least MinSecretLen bytes; a nil secret makes New use
// the one kept in dir, generating it on first use, so links survive a
// restart. The file system must support user extended attributes (ext4,
// xfs, btrfs; tmpfs from Linux 6.6). log receives errors Handler cannot
// answer a client with; nil discards them.
func New(dir, baseURL string, secret []byte, log *slog.Logger) (_ *Store, err error) {
	base, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if secret != nil && len(secret) < MinSecretLen {
		return nil, fmt.Errorf("blob link secret: %d bytes, want at least %d: %w", len(secret), MinSecretLen, blob.ErrInvalid)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("blob directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("blob directory: %w", err)
	}
	s := &Store{root: root, baseURL: base, secret: secret, log: log, now: time.Now}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.takeLock(); err != nil {
		return nil, fmt.Errorf("blob directory %s: %w", dir, err)
	}
	// Puts that a previous process left unfinished.
	if err := root.RemoveAll(tmpDir); err != nil {
		return nil, fmt.Errorf("blob directory %s: clear %s: %w", dir, tmpDir, err)
	}
	for _, d := range []string{objectsDir, tmpDir} {
		if err := root.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blob directory %s: %w", dir, err)
		}
	}
	if err := s.probeXattr(); err != nil {
		return nil, fmt.Errorf("blob directory %s: the file system must support user extended attributes: %w", dir, err)
	}
	if s.secret == nil {
		if s.secret, err = s.loadSecret(); err != nil {
			return nil, fmt.Errorf("blob directory %s: %w", dir, err)
		}
	}
	return s, nil
}

func parseBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("blob base URL: %v: %w", err, blob.ErrInvalid)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("blob base URL %q: want http(s)://host[:port][/path]: %w", raw, blob.ErrInvalid)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func (s *Store) takeLock() error {
	f, err := s.root.OpenFile(lockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return errors.New("in use by another blob store")
		}
		return fmt.Errorf("lock: %w", err)
	}
	s.lock = f
	return nil
}

func (s *Store) probeXattr() error {
	name := path.Join(tmpDir, "probe")
	f, err := s.root.Create(name)
	if err != nil {
		return err
	}
	defer s.root.Remove(name)
	defer f.Close()
	return setXattr(f, xattrContentType, blob.DefaultContentType)
}

func (s *Store) loadSecret() ([]byte, error) {
	b, err := s.root.ReadFile(secretFile)
	if errors.Is(err, fs.ErrNotExist) {
		b = make([]byte, MinSecretLen)
		rand.Read(b)
		f, err := s.root.OpenFile(secretFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create link secret: %w", err)
		}
		_, err = f.Write(b)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			s.root.Remove(secretFile)
			return nil, fmt.Errorf("write link secret: %w", err)
		}
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read link secret: %w", err)
	}
	if len(b) < MinSecretLen {
		return nil, fmt.Errorf("link secret %s: %d bytes, want at least %d", secretFile, len(b), MinSecretLen)
	}
	return b, nil
}

// Close releases the directory; calls after it fail. Links keep working
// for a Store opened on the directory later with the same secret.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		var errs []error
		if s.lock != nil {
			errs = append(errs, s.lock.Close())
		}
		errs = append(errs, s.root.Close())
		err = errors.Join(errs...)
	})
	return err
}

// copyBufs holds the buffers Put streams through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// Put implements blob.Store. The object is written under tmp/, synced, and
// renamed into place.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Object{}, err
	}
	ct, err := blob.ContentType(contentType)
	if err != nil {
		return blob.Object{}, err
	}
	if err := blob.CheckSize(size); err != nil {
		return blob.Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Object{}, err
	}
	tmp := path.Join(tmpDir, rand.Text())
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	obj, err := s.write(ctx, f, key, r, size, ct)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("put %s: %w", key, cerr)
	}
	if err == nil {
		err = s.commit(tmp, key)
	}
	if err != nil {
		s.root.Remove(tmp)
		return blob.Object{}, err
	}
	return obj, nil
}

// write streams r into f and records its metadata.
func (s *Store) write(ctx context.Context, f *os.File, key string, r io.Reader, size int64, ct string) (blob.Object, error) {
	hr := blob.NewHashReader(ctxReader{ctx, r}, size)
	bp := copyBufs.Get().(*[]byte)
	_, err := io.CopyBuffer(writerOnly{f}, hr, *bp)
	copyBufs.Put(bp)
	if err == nil {
		err = hr.Verify()
	}
	if err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	sum := hr.Sum()
	if err := setXattr(f, xattrContentType, ct); err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := setXattr(f, xattrSHA256, sum); err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return blob.Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	return blob.Object{Key: key, Size: hr.N(), ContentType: ct, SHA256: sum, ModTime: fi.ModTime()}, nil
}

// commit renames the finished tmp file to key's place.
func (s *Store) commit(tmp, key string) error {
	dst := path.Join(objectsDir, key)
	var err error
	// A Delete that empties a directory removes it; if that happens
	// between MkdirAll and Rename, try again.
	for range 10 {
		if err = s.root.MkdirAll(path.Dir(dst), 0o700); err == nil {
			if err = s.root.Rename(tmp, dst); err == nil {
				return s.syncDir(path.Dir(dst))
			}
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) ||
		errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
		return fmt.Errorf("put %s: %w", key, blob.ErrConflict)
	}
	return fmt.Errorf("put %s: %w", key, err)
}

// syncDir makes a rename into dir survive a crash, so an object whose Put
// returned is there after a restart.
func (s *Store) syncDir(dir string) error {
	d, err := s.root.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Get implements blob.Store; the reader is the object's *os.File.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, blob.Object{}, err
	}
	f, obj, err := s.open(key)
	if err != nil {
		return nil, blob.Object{}, err
	}
	return f, obj, nil
}

// Stat implements blob.Store.
func (s *Store) Stat(ctx context.Context, key string) (blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Object{}, err
	}
	f, obj, err := s.open(key)
	if err != nil {
		return blob.Object{}, err
	}
	f.Close()
	return obj, nil
}

// open opens key's file and describes it from the open file, so the
// description matches the content even if the object is replaced.
func (s *Store) open(key string) (*os.File, blob.Object, error) {
	f, err := s.root.OpenFile(path.Join(objectsDir, key), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
			return nil, blob.Object{}, fmt.Errorf("%s: %w", key, blob.ErrNotFound)
		}
		return nil, blob.Object{}, fmt.Errorf("open %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, blob.Object{}, fmt.Errorf("open %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, blob.Object{}, fmt.Errorf("%s: %w", key, blob.ErrNotFound)
	}
	ct, err := getXattr(f, xattrContentType)
	if err == nil && ct == "" {
		ct = blob.DefaultContentType
	}
	var sum string
	if err == nil {
		sum, err = getXattr(f, xattrSHA256)
	}
	if err != nil {
		f.Close()
		return nil, blob.Object{}, fmt.Errorf("open %s: %w", key, err)
	}
	return f, blob.Object{Key: key, Size: fi.Size(), ContentType: ct, SHA256: sum, ModTime: fi.ModTime()}, nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidateKey(key); err != nil {
		return err
	}
	return s.remove(key)
}

// remove deletes key's file, then the directories that leaves empty.
func (s *Store) remove(key string) error {
	name := path.Join(objectsDir, key)
	fi, err := s.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if fi.IsDir() {
		return nil // not an object, only other objects' directory
	}
	if err := s.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	for dir := path.Dir(name); dir != objectsDir; dir = path.Dir(dir) {
		if s.root.Remove(dir) != nil {
			break // not empty (or already gone): stop
		}
	}
	return nil
}

// DeletePrefix implements blob.Store.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return fmt.Errorf("delete everything: empty prefix: %w", blob.ErrInvalid)
	}
	if err := blob.ValidatePrefix(prefix); err != nil {
		return err
	}
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.remove(k); err != nil {
			return err
		}
	}
	return nil
}

// List implements blob.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Object, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	objs := make([]blob.Object, 0, len(keys))
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, obj, err := s.open(k)
		if errors.Is(err, blob.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		f.Close()
		objs = append(objs, obj)
	}
	return objs, nil
}

// keys returns the keys of the regular files whose key starts with
// prefix, sorted. It walks only the directory the prefix names and the
// subdirectories that can hold matches.
func (s *Store) keys(ctx context.Context, prefix string) ([]string, error) {
	start := objectsDir
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = path.Join(objectsDir, prefix[:i])
	}
	var keys []string
	err := fs.WalkDir(s.root.FS(), start, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			// Gone (deleted meanwhile, or the prefix names nothing).
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == objectsDir {
			return nil
		}
		key := strings.TrimPrefix(name, objectsDir+"/")
		if d.IsDir() {
			if name != start && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// SignedURL implements blob.Store:
// <baseURL>/v1/blobs/<key, each segment path-escaped>?expires=<unix
// seconds>&sig=<hex HMAC-SHA256(secret, key + "\n" + expires)>.
func (s *Store) SignedURL(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	if err := blob.ValidateKey(key); err != nil {
		return "", time.Time{}, err
	}
	if err := blob.CheckTTL(ttl); err != nil {
		return "", time.Time{}, err
	}
	end := s.now().Add(ttl)
	exp := end.Unix()
	if end.After(time.Unix(exp, 0)) {
		exp++ // never shorter than ttl
	}
	expires := strconv.FormatInt(exp, 10)
	u := s.baseURL + PathPrefix + EscapeKey(key) +
		"?expires=" + expires + "&sig=" + hex.EncodeToString(s.sign(key, expires))
	return u, time.Unix(exp, 0), nil
}

// EscapeKey path-escapes each segment of key, keeping the slashes.
func EscapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}

func (s *Store) sign(key, expires string) []byte {
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte(key))
	mac.Write([]byte{'\n'})
	mac.Write([]byte(expires))
	return mac.Sum(nil)
}

// ctxReader stops a Put's copy once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writerOnly hides *os.File's ReadFrom, so io.CopyBuffer uses the pooled
// buffer.
type writerOnly struct{ io.Writer }

func setXattr(f *os.File, name, value string) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Fsetxattr(int(fd), name, []byte(value), 0)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set %s: %w", name, serr)
	}
	return nil
}

// getXattr returns "" for a missing attribute.
func getXattr(f *os.File, name string) (string, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var (
		buf  [512]byte
		n    int
		serr error
	)
	if err := rc.Control(func(fd uintptr) {
		n, serr = unix.Fgetxattr(int(fd), name, buf[:])
	}); err != nil {
		return "", err
	}
	if errors.Is(serr, unix.ENODATA) {
		return "", nil
	}
	if serr != nil {
		return "", fmt.Errorf("get %s: %w", name, serr)
	}
	return string(buf[:n]), nil
}

var _ blob.Store = (*Store)(nil)
