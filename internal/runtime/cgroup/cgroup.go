// Package cgroup reads the kernel's per-sandbox accounting — peak memory, OOM
// kills, refused forks, and the CPU time and memory in use — from cgroup v1
// or v2, changes a running sandbox's limits (all or nothing), and removes
// cgroups a dead process left behind.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/runtime"
)

// Root is where cgroup file systems are mounted.
const Root = "/sys/fs/cgroup"

// Stats are the accounting facts of one cgroup.
type Stats struct {
	PeakMemoryBytes int64
	// OOMKills counts processes of the cgroup any OOM killer killed: at
	// this cgroup's limit, at an ancestor's, or the host's.
	OOMKills int64
	// MemoryAtLimit: the peak memory use of the window PeakMemoryBytes
	// measures came within limitSlack of this cgroup's own memory limit
	// (memory.peak and memory.max on v2; memory.max_usage_in_bytes and
	// memory.limit_in_bytes on v1, whose failcnt recent kernels no longer
	// count). An OOM kill without it was not at this cgroup's limit: at an
	// ancestor's, or the host's memory ran out.
	MemoryAtLimit bool
	PidsLimitHits int64
}

// limitSlack is how far below its limit a cgroup's peak use may stay when
// the limit refuses a charge: the refused charge's size, a transparent
// huge page at most.
const limitSlack = 4 << 20

var unified = sync.OnceValue(func() bool {
	var st unix.Statfs_t
	return unix.Statfs(Root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
})

// Unified reports whether the host uses the cgroup v2 unified hierarchy.
func Unified() bool { return unified() }

// SwapAccounting reports whether memory+swap can be limited (v1 needs
// swapaccount; v2 always can).
func SwapAccounting() bool {
	if Unified() {
		return true
	}
	_, err := os.Stat(filepath.Join(Root, "memory", "memory.memsw.limit_in_bytes"))
	return err == nil
}

// dir returns the directory of cgroup path (as given to the runtime, e.g.
// "/corral/abc") for a v1 controller, or the unified directory.
func dir(controller, path string) string {
	if Unified() {
		return filepath.Join(Root, path)
	}
	return filepath.Join(Root, controller, path)
}

// Unthrottle lifts the CPU quota, so that processes being killed get the
// CPU time they need to exit: a throttled fork bomb can otherwise take a
// second to die.
func Unthrottle(path string) error {
	var err error
	if Unified() {
		err = writeFile(filepath.Join(dir("", path), "cpu.max"), []byte("max\n"))
	} else {
		err = writeFile(filepath.Join(dir("cpu", path), "cpu.cfs_quota_us"), []byte("-1\n"))
	}
	if err != nil {
		return fmt.Errorf("lift cpu quota: %w", err)
	}
	return nil
}

// Sandbox CPU weights: what the parent of every sandbox gets against its
// siblings (corral itself, the runtimes it runs, the rest of the host),
// each of which has the kernel's default, 1024 (v1 cpu.shares) or 100 (v2
// cpu.weight).
const (
	sandboxShares = 128
	sandboxWeight = 12
)

// Yield makes the cgroup at parent, under which every sandbox lives, yield
// the CPU to its siblings when both want it: with many sandboxes busy,
// corral (its API, its database writes, the kills a cancel needs) and the
// runtimes it runs would otherwise get a sliver of the CPU each (a cancel
// took seconds under a burst; with this, tens of milliseconds). Weights
// only divide the CPU under contention: an idle host gives the sandboxes
// all of it, and their own quotas (Limits.CPUCores) still hold. parent is
// made if it does not exist.
func Yield(parent string) error {
	name, value := "cpu.shares", strconv.Itoa(sandboxShares)
	d := dir("cpu", parent)
	if Unified() {
		name, value = "cpu.weight", strconv.Itoa(sandboxWeight)
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("cgroup %s: %w", parent, err)
	}
	if err := writeFile(filepath.Join(d, name), []byte(value)); err != nil {
		return fmt.Errorf("cgroup %s: set %s: %w", parent, name, err)
	}
	return nil
}

// Processes returns how many tasks the cgroup holds now.
func Processes(path string) (int64, error) {
	return readInt(dir("pids", path), "pids.current")
}

// Exists reports whether the cgroup at path exists.
func Exists(path string) bool {
	_, err := os.Stat(dir("memory", path))
	return err == nil
}

// Children lists the cgroups directly under parent in any hierarchy.
func Children(parent string) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range hierarchies() {
		entries, _ := os.ReadDir(filepath.Join(d, parent))
		for _, e := range entries {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// Kill kills every process in the cgroup at path and waits (up to
// timeout) until none is left, so that the cgroup can be removed. It is
// what cleans up after a sandbox whose runtime never said what it started
// (a creation killed half-way leaves runsc's sandbox and gofer running):
// whatever the runtime started is in the sandbox's cgroup. Processes that
// fork meanwhile are killed on the next pass. A killed process that is
// this process's child (corral is the sandboxes' subreaper) is reaped, so
// it does not stay a zombie; a dead one has left the cgroup already.
func Kill(path string, timeout time.Duration) error {
	procs := filepath.Join(dir("pids", path), "cgroup.procs")
	deadline := time.Now().Add(timeout)
	var killed []int
	defer func() {
		for _, pid := range killed {
			var info unix.Siginfo
			// ECHILD: not ours to reap.
			_ = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG, nil)
		}
	}()
	for {
		b, err := os.ReadFile(procs) // many records: see readFile
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list cgroup processes: %w", err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: %d processes left after %v", path, len(pids), timeout)
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 0 && unix.Kill(pid, unix.SIGKILL) == nil {
				killed = append(killed, pid)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Remove deletes the cgroup at path from every hierarchy. Processes must be
// gone; a missing cgroup is not an error. A hierarchy that answers EBUSY
// is asked again for up to removeWait: cgroup2 counts a process that has
// exited but is not yet reaped, where v1's cgroup.procs (what Kill reads)
// no longer lists it, so on a hybrid machine the unified hierarchy can
// refuse for a moment after the others let go.
func Remove(path string) error {
	var errs []error
	for _, d := range hierarchies() {
		p := filepath.Join(d, path)
		err := os.Remove(p)
		for deadline := time.Now().Add(removeWait); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			err = os.Remove(p)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeWait bounds how long Remove asks a busy hierarchy again.
const removeWait = 5 * time.Second

// Dirs lists the directories of the cgroup at path, one per hierarchy
// that holds it.
func Dirs(path string) []string {
	var out []string
	for _, d := range hierarchies() {
		if fi, err := os.Stat(filepath.Join(d, path)); err == nil && fi.IsDir() {
			out = append(out, filepath.Join(d, path))
		}
	}
	return out
}

func hierarchies() []string {
	if Unified() {
		return []string{Root}
	}
	entries, _ := os.ReadDir(Root)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(Root, e.Name()))
		}
	}
	return out
}

// readFile reads the cgroup file name in about three system calls (open,
// read, close) where os.ReadFile takes about nine: it stats the file, reads
// until a read returns nothing, and, cgroup files being pollable, registers
// the file with the runtime's poller (two epoll_ctl calls, two fcntl). On a
// paravirtualised host each system call is dear, and the engine reads a
// sandbox's counters on every execution. A cgroup file that holds one
// value or a few keys is one record of the kernel's seq_file, which a read
// returns as far as the buffer holds, so a read shorter than the buffer
// ended the file. A file of many records (cgroup.procs) can read short
// before its end: read it with os.ReadFile.
func readFile(name string) ([]byte, error) {
	fd, err := openFile(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return preadAll(fd, name)
}

// writeFile writes data to the cgroup file name, in one write (a cgroup
// file takes a value in one), without what os.WriteFile adds (see
// readFile). The file must exist.
func writeFile(name string, data []byte) error {
	fd, err := openFile(name, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return pwriteAll(fd, name, data)
}

func openFile(name string, flag int) (int, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return fd, nil
	}
}

func readInt(d, name string) (int64, error) {
	b, err := readFile(filepath.Join(d, name))
	if err != nil {
		return 0, fmt.Errorf("read cgroup: %w", err)
	}
	return parseInt(b, filepath.Join(d, name))
}

// readKey reads "key value" lines; a missing key is 0.
func readKey(d, name, key string) (int64, error) {
	b, err := readFile(filepath.Join(d, name))
	if err != nil {
		return 0, fmt.Errorf("read cgroup: %w", err)
	}
	return parseKey(b, name, key)
}

// parseInt parses the number the file name holds, b.
func parseInt(b []byte, name string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", name, err)
	}
	return v, nil
}

// parseKey returns the value of key in b, the "key value" lines of the
// file name; a missing key is 0.
func parseKey(b []byte, name, key string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %s: %w", name, key, err)
			}
			return n, nil
		}
	}
	return 0, nil
}

// Limits are the cgroup limits a running sandbox can change. Zero leaves
// a limit as it is.
type Limits struct {
	MemoryBytes int64 // memory, and memory+swap when swap is accounted
	CPUQuotaUS  int64 // per PeriodUS; -1 lifts the quota
	PeriodUS    int64
	Pids        int64
}

// SetLimits writes limits straight into the cgroup at path: a few small
// writes, where `runc update` costs a process start. It is all or nothing:
// memory goes first, as the only limit the kernel can refuse, and when a
// write fails the ones before it are restored. A memory limit below what
// the cgroup holds and the kernel cannot reclaim is a
// *runtime.LimitBelowUsageError. If restoring fails as well, the error says
// so and matches nothing: the cgroup is in neither state.
func SetLimits(path string, l Limits, swap bool) error {
	if Unified() {
		return setV2(dir("", path), l, swap)
	}
	return setV1(dir("memory", path), dir("cpu", path), dir("pids", path), l, swap)
}

// setV1 writes l into the v1 controllers' directories. The kernel refuses
// (EBUSY) a memory or memory+swap limit below usage after reclaiming what
// it could, and leaves that limit as it was. Memory+swap may never be below
// memory, so the order of the two writes follows the direction of the
// change.
func setV1(mem, cpu, pids string, l Limits, swap bool) error {
	var w writes
	return w.done(func() error {
		if l.MemoryBytes > 0 {
			cur, err := readInt(mem, "memory.limit_in_bytes")
			if err != nil {
				return err
			}
			order := []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}
			if l.MemoryBytes > cur {
				order[0], order[1] = order[1], order[0]
			}
			for _, name := range order {
				memsw := name == "memory.memsw.limit_in_bytes"
				if memsw && !swap {
					continue
				}
				err := w.set(mem, name, strconv.FormatInt(l.MemoryBytes, 10))
				if !errors.Is(err, unix.EBUSY) {
					if err != nil {
						return err
					}
					continue
				}
				refused := &runtime.LimitBelowUsageError{Resource: "memory", Limit: l.MemoryBytes}
				usage := "memory.usage_in_bytes"
				if memsw {
					refused.Resource, usage = "memory+swap", "memory.memsw.usage_in_bytes"
				}
				refused.Usage, _ = readInt(mem, usage) // for the message only
				return refused
			}
		}
		if l.PeriodUS > 0 {
			if err := w.set(cpu, "cpu.cfs_period_us", strconv.FormatInt(l.PeriodUS, 10)); err != nil {
				return err
			}
			q := l.CPUQuotaUS
			if q <= 0 {
				q = -1
			}
			if err := w.set(cpu, "cpu.cfs_quota_us", strconv.FormatInt(q, 10)); err != nil {
				return err
			}
		}
		if l.Pids > 0 {
			return w.set(pids, "pids.max", strconv.FormatInt(l.Pids, 10))
		}
		return nil
	})
}

// setV2 writes l into the unified directory d.
func setV2(d string, l Limits, swap bool) error {
	var w writes
	return w.done(func() error {
		if l.MemoryBytes > 0 {
			if err := makeRoom(d, l.MemoryBytes); err != nil {
				return err
			}
			if err := w.set(d, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return err
			}
			if swap {
				if err := w.set(d, "memory.swap.max", "0"); err != nil {
					return err
				}
			}
		}
		if l.PeriodUS > 0 {
			q := "max"
			if l.CPUQuotaUS > 0 {
				q = strconv.FormatInt(l.CPUQuotaUS, 10)
			}
			if err := w.set(d, "cpu.max", q+" "+strconv.FormatInt(l.PeriodUS, 10)); err != nil {
				return err
			}
		}
		if l.Pids > 0 {
			return w.set(d, "pids.max", strconv.FormatInt(l.Pids, 10))
		}
		return nil
	})
}

// makeRoom gets the v2 cgroup in d down to limit bytes before memory.max
// is lowered to it, or refuses. Unlike v1, v2 takes a memory.max below
// usage and, when reclaim falls short, OOM-kills in the cgroup: a claim
// would kill a pooled sandbox's zygote, or on gVisor its whole Sentry, and
// the execution would run in a broken sandbox. memory.reclaim (Linux 5.19)
// reclaims without killing, failing with EAGAIN when it falls short.
func makeRoom(d string, limit int64) error {
	usage, err := readInt(d, "memory.current")
	if err != nil || usage <= limit {
		return err
	}
	// Whether it failed (EAGAIN: short; ENOENT: an older kernel) or not,
	// the usage after it decides.
	_ = writeFile(filepath.Join(d, "memory.reclaim"), []byte(strconv.FormatInt(usage-limit, 10)+"\n"))
	if usage, err = readInt(d, "memory.current"); err != nil {
		return err
	}
	if usage > limit {
		return &runtime.LimitBelowUsageError{Resource: "memory", Limit: limit, Usage: usage}
	}
	return nil
}

// writes changes cgroup files and can put them back.
type writes struct {
	undo []func() error // newest last
}

// set writes v to d/name, remembering what was there.
func (w *writes) set(d, name, v string) error {
	f := filepath.Join(d, name)
	old, err := readFile(f)
	if err != nil {
		return fmt.Errorf("read cgroup: %w", err)
	}
	if err := writeFile(f, []byte(v+"\n")); err != nil {
		return fmt.Errorf("set %s: %w", name, err)
	}
	w.undo = append(w.undo, func() error {
		if err := writeFile(f, old); err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
		return nil
	})
	return nil
}

// done runs apply and, if it fails, restores what it changed, newest first
// (which keeps v1's memory+swap at or above memory throughout).
func (w *writes) done(apply func() error) error {
	err := apply()
	if err == nil {
		return nil
	}
	var errs []error
	for i := len(w.undo) - 1; i >= 0; i-- {
		if rerr := w.undo[i](); rerr != nil {
			errs = append(errs, rerr)
		}
	}
	if len(errs) > 0 {
		// Not %w for err: a refusal promises that nothing changed.
		return fmt.Errorf("%v; then %w", err, errors.Join(errs...))
	}
	return err
}

// MemoryUsage returns the cgroup's current memory use.
func MemoryUsage(path string) (int64, error) {
	return once(path).MemoryUsage()
}

// Usage is what a cgroup uses now.
type Usage struct {
	// CPUNanos is the CPU time its tasks used, in nanoseconds (a counter).
	CPUNanos int64
	// MemoryBytes is its memory less the page cache it may reclaim
	// (CacheBytes): shared memory and tmpfs pages stay in MemoryBytes, as
	// without swap they cannot be reclaimed (a gVisor Sentry keeps its
	// programs' memory in shared memory).
	MemoryBytes, CacheBytes int64
	// MemoryLimitBytes is its memory limit; 0 is none.
	MemoryLimitBytes int64
}

// noLimit is above any memory limit a cgroup holds (v1 answers "none" as
// the largest page-aligned int64).
const noLimit = 1 << 62

// ReadUsage reads what the cgroup at path uses now.
func ReadUsage(path string) (Usage, error) {
	if Unified() {
		return usageV2(dir("", path))
	}
	return usageV1(dir("cpuacct", path), dir("memory", path))
}

// usageV1 reads cpuacct.usage in the directory cpuacct, and
// memory.usage_in_bytes, memory.stat and memory.limit_in_bytes in mem.
func usageV1(cpuacct, mem string) (Usage, error) {
	var u Usage
	var err error
	if u.CPUNanos, err = readInt(cpuacct, "cpuacct.usage"); err != nil {
		return u, err
	}
	return u, memoryUsage(&u, mem, "memory.usage_in_bytes", "total_cache", "total_shmem", "memory.limit_in_bytes")
}

// usageV2 reads cpu.stat, memory.current, memory.stat and memory.max in
// the unified directory d.
func usageV2(d string) (Usage, error) {
	var u Usage
	usec, err := readKey(d, "cpu.stat", "usage_usec")
	if err != nil {
		return u, err
	}
	u.CPUNanos = usec * 1000
	return u, memoryUsage(&u, d, "memory.current", "file", "shmem", "memory.max")
}

// memoryUsage fills u's memory from the files of d: current (the
// cgroup's memory), the page cache and shared memory keys of memory.stat
// (shared memory is in the page cache), and the limit.
func memoryUsage(u *Usage, d, current, cache, shmem, limit string) error {
	cur, err := readInt(d, current)
	if err != nil {
		return err
	}
	c, err := readKey(d, "memory.stat", cache)
	if err != nil {
		return err
	}
	sh, err := readKey(d, "memory.stat", shmem)
	if err != nil {
		return err
	}
	u.CacheBytes = max(c-sh, 0)
	u.MemoryBytes = max(cur-u.CacheBytes, 0)
	b, err := readFile(filepath.Join(d, limit))
	if err != nil {
		return fmt.Errorf("read cgroup: %w", err)
	}
	// "max" (v2) does not parse: no limit, as a v1 limit of noLimit.
	if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n < noLimit {
		u.MemoryLimitBytes = n
	}
	return nil
}

// CPUNanos reads the CPU time the tasks of the cgroup at path, and of the
// cgroups under it (those removed since included), have used, in
// nanoseconds: cpuacct.usage on v1, cpu.stat's usage_usec on v2. It reads
// only that, where ReadUsage reads the memory files too.
func CPUNanos(path string) (int64, error) {
	if Unified() {
		usec, err := readKey(dir("", path), "cpu.stat", "usage_usec")
		return usec * 1000, err
	}
	return readInt(dir("cpuacct", path), "cpuacct.usage")
}
