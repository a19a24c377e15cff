package collect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// ArtifactLimits bound what a collection takes from a sandbox.
type ArtifactLimits struct {
	MaxFiles      int   // files collected
	MaxFileBytes  int64 // one file's apparent size
	MaxTotalBytes int64 // all files' apparent size
	// MaxAllocatedBytes bounds the blocks actually used, so a sparse 1 TB
	// file cannot pass as small.
	MaxAllocatedBytes int64
	MaxDepth          int // directory levels under output/
	MaxPathBytes      int // a collected path's length
	// MaxEntries bounds the directory entries examined, collected or not.
	MaxEntries int
	// Since, if set, skips files not modified since (a session's earlier
	// outputs).
	Since time.Time
}

// DefaultArtifactLimits: 1,000 files, 512 MiB each, 1 GiB in all; paths
// short enough that with a tenant and execution prefix they stay within a
// blob key's 1,024 bytes.
func DefaultArtifactLimits() ArtifactLimits {
	return ArtifactLimits{MaxFiles: 1000, MaxFileBytes: 512 << 20, MaxTotalBytes: 1 << 30,
		MaxAllocatedBytes: 1 << 30, MaxDepth: 16, MaxPathBytes: 768, MaxEntries: 20000}
}

// Found is a regular file to collect. File is open for reading at offset 0
// and closed by the collector after the callback returns.
type Found struct {
	Path string // relative to output/, '/'-separated, valid UTF-8
	Size int64
	File *os.File
}

// Skipped is something under output/ that was not collected, and why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// maxSkipped caps the skip notes kept.
const maxSkipped = 50

// strict makes every open resolve beneath its directory without following
// any symlink (not even one inside the tree) or crossing a mount: whatever
// a program leaves or swaps in, nothing outside output/ is ever opened.
const strict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// CollectFiles walks workspace/output on the host and calls put for every
// regular file within the limits. FIFOs, sockets, devices and symlinks are
// skipped without being opened for reading; files are opened non-blocking.
// The skip list says what was left and why. An error means the walk could
// not be done at all, or put failed.
func CollectFiles(ctx context.Context, workspace string, lim ArtifactLimits, put func(context.Context, Found) error) ([]Skipped, error) {
	root, err := unix.Open(workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	defer unix.Close(root)
	c := &collector{lim: lim, put: put}
	out, err := unix.Openat2(root, "output", &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: strict})
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case err != nil:
		c.skip("", "output is not a directory (a symlink or another kind of file)")
		return c.skipped, nil
	}
	err = c.walk(ctx, out)
	return c.skipped, err
}

type collector struct {
	lim              ArtifactLimits
	put              func(context.Context, Found) error
	files, entries   int
	total, allocated int64
	skipped          []Skipped
	stopped          bool
}

func (c *collector) skip(p, why string) {
	if len(c.skipped) < maxSkipped {
		c.skipped = append(c.skipped, Skipped{Path: printable(p), Reason: why})
	}
}

// walk collects the tree under out (it takes ownership of the fd) breadth
// first, each directory's entries in name order: what a program puts at
// the top of output/ is collected before what it buries, and the same tree
// always gives the same artifacts and skips. Subdirectories are reopened
// from out by their path, under the same strict resolution.
func (c *collector) walk(ctx context.Context, out int) error {
	defer unix.Close(out)
	type dir struct {
		rel   string
		depth int
	}
	queue := []dir{{"", 0}}
	for len(queue) > 0 && !c.stopped {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := queue[0]
		queue = queue[1:]
		fd := out
		if d.rel != "" {
			var err error
			fd, err = unix.Openat2(out, d.rel, &unix.OpenHow{
				Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: strict})
			if err != nil {
				c.skip(d.rel, "directory could not be opened safely")
				continue
			}
		}
		subdirs, err := c.dir(ctx, fd, d.rel, d.depth)
		if d.rel != "" {
			unix.Close(fd)
		}
		if err != nil {
			return err
		}
		for _, sub := range subdirs {
			queue = append(queue, dir{sub, d.depth + 1})
		}
	}
	return nil
}

// dir collects one directory's files and returns its subdirectories to
// visit. It reads no more entries than the examination budget has left.
func (c *collector) dir(ctx context.Context, fd int, rel string, depth int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", rel, err)
	}
	f := os.NewFile(uintptr(dup), rel)
	defer f.Close()
	budget := c.lim.MaxEntries - c.entries + 1
	if budget <= 0 {
		budget = 1
	}
	entries, err := f.ReadDir(budget)
	if err != nil && err != io.EOF {
		c.skip(rel, "unreadable directory")
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	var subdirs []string
	for _, e := range entries {
		if c.stopped {
			break
		}
		sub, err := c.entry(ctx, fd, rel, depth, e)
		if err != nil {
			return nil, err
		}
		if sub != "" {
			subdirs = append(subdirs, sub)
		}
	}
	return subdirs, nil
}

// entry examines one directory entry: a file is collected or skipped, a
// directory within the depth limit is returned for a later visit.
func (c *collector) entry(ctx context.Context, dirfd int, rel string, depth int, e os.DirEntry) (string, error) {
	c.entries++
	if c.entries > c.lim.MaxEntries {
		c.stopped = true
		c.skip(rel, fmt.Sprintf("stopped after examining %d entries", c.lim.MaxEntries))
		return "", nil
	}
	name := e.Name()
	p := path.Join(rel, name)
	if !validName(name) {
		c.skip(p, "name is not printable UTF-8")
		return "", nil
	}
	if len(p) > c.lim.MaxPathBytes {
		c.skip(p, fmt.Sprintf("path longer than %d bytes", c.lim.MaxPathBytes))
		return "", nil
	}
	// Go fills the type from the directory entry, or from an lstat where
	// the file system does not record it; either way no link is followed.
	typ := e.Type()
	switch {
	case typ.IsDir():
		if depth+1 >= c.lim.MaxDepth {
			c.skip(p, fmt.Sprintf("deeper than %d levels", c.lim.MaxDepth))
			return "", nil
		}
		return p, nil
	case typ&os.ModeSymlink != 0:
		c.skip(p, "symbolic link (not followed)")
		return "", nil
	case typ.IsRegular():
		return "", c.file(ctx, dirfd, p, name)
	default:
		c.skip(p, "not a regular file")
		return "", nil
	}
}

func (c *collector) file(ctx context.Context, dirfd int, p, name string) error {
	if c.files >= c.lim.MaxFiles {
		c.stopped = true
		c.skip(p, fmt.Sprintf("more than %d files; the rest were not collected", c.lim.MaxFiles))
		return nil
	}
	// Non-blocking: a file swapped for a FIFO after ReadDir cannot hang us.
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC, Resolve: strict})
	if err != nil {
		c.skip(p, "could not be opened safely")
		return nil
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.skip(p, "not a regular file")
		return nil
	}
	if !c.lim.Since.IsZero() && time.Unix(st.Mtim.Unix()).Before(c.lim.Since) {
		return nil
	}
	alloc := st.Blocks * 512
	switch {
	case st.Size > c.lim.MaxFileBytes:
		c.skip(p, fmt.Sprintf("larger than %d bytes", c.lim.MaxFileBytes))
		return nil
	case c.total+st.Size > c.lim.MaxTotalBytes:
		c.skip(p, fmt.Sprintf("artifacts would exceed %d bytes in all", c.lim.MaxTotalBytes))
		return nil
	case c.allocated+alloc > c.lim.MaxAllocatedBytes:
		c.skip(p, fmt.Sprintf("artifacts would use more than %d bytes of disk", c.lim.MaxAllocatedBytes))
		return nil
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return fmt.Errorf("collect %s: %w", p, err)
	}
	c.files++
	c.total += st.Size
	c.allocated += alloc
	// The size is read once, here: bytes appended later are not sent.
	return c.put(ctx, Found{Path: p, Size: st.Size, File: f})
}

// validName accepts UTF-8 names without control characters.
func validName(n string) bool {
	if n == "" || len(n) > 255 || !utf8.ValidString(n) {
		return false
	}
	for _, r := range n {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// printable makes a skipped path safe to put in a record.
func printable(p string) string {
	p = strings.ToValidUTF8(p, "\uFFFD")
	p = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, p)
	if len(p) > 200 {
		p = p[:200] + "…"
	}
	return p
}
