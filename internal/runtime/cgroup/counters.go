package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// The files Counters reads, by index.
const (
	peakFile  = iota // peak memory: memory.peak, memory.max_usage_in_bytes
	oomFile          // OOM kills: memory.events, memory.oom_control
	limitFile        // memory limit: memory.max, memory.limit_in_bytes
	pidsFile         // refused forks: pids.events
	usageFile        // memory in use: memory.current, memory.usage_in_bytes
	numFiles
)

// Counters reads one cgroup's accounting (Read) and starts its peak-memory
// windows (ResetPeak) through files it keeps open, so that each is one
// system call, a pread or a pwrite at offset 0 (which makes the kernel's
// seq_file show the file anew), where opening, reading and closing a file
// takes three: the engine reads a sandbox's counters three times per
// execution. On cgroup v2 (Linux 6.12) a reset of memory.peak holds for the
// file descriptor it was written to, so the window ResetPeak starts is the
// one Read measures only when both use the same one, as here.
//
// Close closes the files, which must happen before the cgroup is removed
// (an open file keeps a removed cgroup's memory in the kernel); after it,
// Read and ResetPeak open the files for each call. It is safe for
// concurrent use.
type Counters struct {
	path   string
	names  [numFiles]string // the files' paths
	mu     sync.Mutex
	fds    [numFiles]int // -1: not open
	closed bool
	// peakRO: the peak file opened read-only, as a kernel that cannot
	// reset memory.peak (before 6.12) refuses to open it for writing.
	peakRO bool
}

// NewCounters returns the Counters of the cgroup at path (as given to the
// runtime, e.g. "/corral/abc"); it opens files when first read.
func NewCounters(path string) *Counters {
	c := &Counters{path: path}
	for i := range c.fds {
		c.fds[i] = -1
	}
	mem := dir("memory", path)
	c.names = [numFiles]string{"memory.max_usage_in_bytes", "memory.oom_control", "memory.limit_in_bytes",
		"pids.events", "memory.usage_in_bytes"}
	if Unified() {
		c.names = [numFiles]string{"memory.peak", "memory.events", "memory.max", "pids.events", "memory.current"}
	}
	for i := range c.names {
		d := mem
		if i == pidsFile {
			d = dir("pids", path)
		}
		c.names[i] = filepath.Join(d, c.names[i])
	}
	return c
}

// Read returns the accounting of the cgroup at path, opening its files for
// this one read.
func Read(path string) (Stats, error) {
	return once(path).Read()
}

// once returns Counters of the cgroup at path that opens its files for
// each call.
func once(path string) *Counters {
	c := NewCounters(path)
	c.closed = true
	return c
}

// name returns the path of file i and, for the files of "key value" lines,
// the key Read wants.
func (c *Counters) name(i int) (string, string) {
	if i == pidsFile {
		return c.names[i], "max"
	}
	return c.names[i], "oom_kill"
}

// Read returns the cgroup's accounting.
func (c *Counters) Read() (Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Stats
	var err error
	if s.PeakMemoryBytes, err = c.readInt(peakFile); err != nil {
		return s, err
	}
	if s.OOMKills, err = c.readKey(oomFile); err != nil {
		return s, err
	}
	// "max" (v2) or an unreadable limit is no limit.
	limit, err := c.readInt(limitFile)
	s.MemoryAtLimit = err == nil && limit > 0 && s.PeakMemoryBytes >= limit-limitSlack
	if s.PidsLimitHits, err = c.readKey(pidsFile); err != nil {
		return s, err
	}
	return s, nil
}

func (c *Counters) readInt(i int) (int64, error) {
	name, _ := c.name(i)
	b, err := c.read(i)
	if err != nil {
		return 0, fmt.Errorf("read cgroup: %w", err)
	}
	return parseInt(b, name)
}

func (c *Counters) readKey(i int) (int64, error) {
	name, key := c.name(i)
	b, err := c.read(i)
	if err != nil {
		return 0, fmt.Errorf("read cgroup: %w", err)
	}
	return parseKey(b, filepath.Base(name), key)
}

// MemoryUsage returns the cgroup's memory in use now.
func (c *Counters) MemoryUsage() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readInt(usageFile)
}

// ResetPeak starts a new peak-memory window. Kernels before 6.12 cannot
// reset memory.peak on v2; the error says so.
func (c *Counters) ResetPeak() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	name, _ := c.name(peakFile)
	err := c.use(peakFile, func(fd int) error {
		if c.peakRO {
			return errReadOnly
		}
		return pwriteAll(fd, name, []byte("0\n"))
	})
	if errors.Is(err, errReadOnly) {
		err = writeFile(name, []byte("0\n")) // fails as it did: why, the kernel says
	}
	if err != nil {
		return fmt.Errorf("reset peak memory: %w", err)
	}
	return nil
}

var errReadOnly = errors.New("opened read-only")

// Close closes the files Counters keeps open.
func (c *Counters) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for i, fd := range c.fds {
		if fd >= 0 {
			errs = append(errs, unix.Close(fd))
			c.fds[i] = -1
		}
	}
	return errors.Join(errs...)
}

// read reads file i from its start.
func (c *Counters) read(i int) ([]byte, error) {
	var b []byte
	err := c.use(i, func(fd int) error {
		name, _ := c.name(i)
		var err error
		b, err = preadAll(fd, name)
		return err
	})
	return b, err
}

// use calls f with file i's descriptor: the one kept open (opened first if
// need be), or, once closed, one opened for this call. A kept descriptor
// that fails is closed, so the next call opens the file again. c.mu is
// held.
func (c *Counters) use(i int, f func(fd int) error) error {
	name, _ := c.name(i)
	fd := c.fds[i]
	if fd < 0 {
		var err error
		if fd, err = c.open(i, name); err != nil {
			return err
		}
		if c.closed {
			defer unix.Close(fd)
		} else {
			c.fds[i] = fd
		}
	}
	err := f(fd)
	if err != nil && !c.closed && !errors.Is(err, errReadOnly) {
		unix.Close(fd)
		c.fds[i] = -1
	}
	return err
}

// open opens file i: the peak file for reading and writing (ResetPeak
// writes it) where the kernel lets it, the others for reading.
func (c *Counters) open(i int, name string) (int, error) {
	if i != peakFile {
		return openFile(name, unix.O_RDONLY)
	}
	fd, err := openFile(name, unix.O_RDWR)
	c.peakRO = false
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		fd, err = openFile(name, unix.O_RDONLY)
		c.peakRO = err == nil
	}
	return fd, err
}

// preadAll reads the file open as fd from offset 0, with the short-read
// rule of readFile.
func preadAll(fd int, name string) ([]byte, error) {
	b := make([]byte, 0, 1024)
	for {
		n, err := unix.Pread(fd, b[len(b):cap(b)], int64(len(b)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		b = b[:len(b)+n]
		if n == 0 || len(b) < cap(b) {
			return b, nil
		}
		b = slices.Grow(b, cap(b))
	}
}

// pwriteAll writes data to the file open as fd, at offset 0, in one write.
func pwriteAll(fd int, name string, data []byte) error {
	for {
		n, err := unix.Pwrite(fd, data, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: name, Err: err}
		}
		if n < len(data) {
			return &os.PathError{Op: "write", Path: name, Err: io.ErrShortWrite}
		}
		return nil
	}
}
