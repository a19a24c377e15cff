//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A pooled sandbox serves one execution after another (docs/pool.md). Between
// two, the host asks the agent to reset it: nothing one program left may
// reach the next.

// reset ends every watch (reset_live.go), kills every non-persistent
// process, empties req.Clear and the sandbox's other shared places
// (/dev/shm, POSIX and System V IPC), checks that no program changed what
// new processes inherit, and pings zygotes.
func (a *Agent) reset(req ResetRequest) error {
	a.endWatches()
	a.killAll(syscall.SIGKILL, false)
	a.mu.Lock()
	clear(a.orphans)
	a.mu.Unlock()
	for _, dir := range req.Clear {
		if err := a.clearDir(dir); err != nil {
			return err
		}
	}
	if req.IPC {
		if err := a.clearIPC(); err != nil {
			return err
		}
		if now := readIntegrity(); !now.equal(a.baseline) {
			return refuse(KindDirty, "reset: the sandbox's inherited limits changed: %s", now.diff(a.baseline))
		}
	}
	for _, id := range req.Zygotes {
		z := a.zygote(id)
		if z == nil {
			return refuse(KindZygote, "reset: zygote %d is gone", id)
		}
		// The ping makes the next spare, which inherits the zygote's
		// limits: a program of the zygote's uid may have changed them
		// (prlimit, setpriority, sched_setaffinity on its pid).
		z.mu.Lock()
		z.tag++
		tag, baseline, unchecked := z.tag, z.baseline, z.unchecked
		z.mu.Unlock()
		if unchecked != nil {
			return refuse(KindDirty, "reset: zygote %d: %v", z.proc.pid, unchecked)
		}
		now, err := readIntegrityOf(z.proc.pid)
		if err != nil {
			return refuse(KindDirty, "reset: zygote %d: %v", z.proc.pid, err)
		}
		if !now.equal(baseline) {
			return refuse(KindDirty, "reset: zygote %d's inherited limits changed: %s", z.proc.pid, now.diff(baseline))
		}
		if req.CPU != nil {
			a.moveZygote(z, *req.CPU)
		}
		if _, err := z.call(tag, zygoteMsg{Ping: tag}, zygoteTimeout); err != nil {
			return fmt.Errorf("reset: zygote %d: %w", z.proc.pid, err)
		}
	}
	return nil
}

// moveZygote makes z keep to cpu, if cpu is one of the agent's own (the
// sandbox's) and z does not already, and records it as what z passes on.
// Set from here, in Go, for the reason its limits are read from here
// (readIntegrityOf). A CPU that cannot be set is left: this is placement,
// not isolation.
func (a *Agent) moveZygote(z *zygote, cpu int) {
	if !slices.Contains(a.baseline.affinity, cpu) {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if slices.Equal(z.baseline.affinity, []int{cpu}) {
		return
	}
	var set unix.CPUSet
	set.Set(cpu)
	if unix.SchedSetaffinity(z.proc.pid, &set) != nil {
		return
	}
	z.baseline.affinity = []int{cpu}
}

// clearIPC removes what programs left in the sandbox's IPC namespace:
// /dev/shm and POSIX message queues (files), System V shared memory,
// semaphores and message queues.
func (a *Agent) clearIPC() error {
	for _, dir := range []string{"/dev/shm", "/dev/mqueue"} {
		dir = a.hostPath(dir)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // not mounted (gVisor has no /dev/mqueue)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("reset: clear %s: %w", dir, err)
			}
		}
	}
	if a.local {
		return nil // no IPC namespace: the System V objects are the host's
	}
	for _, k := range []struct {
		file string
		rm   func(id int) error
	}{
		{"shm", func(id int) error { _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); return err }},
		{"sem", func(id int) error {
			_, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
			return errnoErr(e)
		}},
		{"msg", func(id int) error {
			_, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
			return errnoErr(e)
		}},
	} {
		ids, ok := sysvIDs("/proc/sysvipc/" + k.file)
		if !ok {
			// gVisor has no /proc/sysvipc and numbers objects from 0.
			ids = make([]int, sysvScan)
			for i := range ids {
				ids[i] = i
			}
		}
		for _, id := range ids {
			if err := k.rm(id); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EIDRM) {
				return fmt.Errorf("reset: remove System V %s %d: %w", k.file, id, err)
			}
		}
	}
	return nil
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// sysvScan is how many System V object ids a reset tries where the kernel
// cannot list them.
const sysvScan = 4096

// sysvIDs reads the ids column of a /proc/sysvipc table.
func sysvIDs(path string) ([]int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var ids []int
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 2 {
			continue // header
		}
		if id, err := strconv.Atoi(f[1]); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// integrity is what a process passes on to the processes it starts and
// another process of the same uid can change: resource limits, niceness
// and CPU affinity.
type integrity struct {
	rlimits  [16]unix.Rlimit
	nice     int
	affinity []int
}

// readIntegrity is this process's integrity; a limit it cannot read (a
// runtime without it) reads as zero, the same at every reset.
func readIntegrity() integrity {
	in, _ := readIntegrityOf(0)
	return in
}

// readIntegrityOf reads the integrity of process pid (0: this one). A
// zygote's is read from here, in Go, rather than by the zygote itself:
// the python that did it at every reset wrote to about 20 of the
// zygote's pages, each copied after the spare's fork (docs/pool.md). The
// first error is returned, with what could be read.
func readIntegrityOf(pid int) (integrity, error) {
	var in integrity
	var first error
	note := func(what string, err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("read the %s of process %d: %w", what, pid, err)
		}
	}
	for r := range in.rlimits {
		err := unix.Prlimit(pid, r, nil, &in.rlimits[r])
		if errors.Is(err, unix.EPERM) {
			// Another uid's process, read without CAP_SYS_RESOURCE (the
			// root agent of a live sandbox and its user's zygote).
			err = procLimits(pid, &in.rlimits)
			note("limits", err)
			break
		}
		note(fmt.Sprintf("limit %d", r), err)
	}
	var err error
	in.nice, err = unix.Getpriority(unix.PRIO_PROCESS, pid)
	note("priority", err)
	var set unix.CPUSet
	err = unix.SchedGetaffinity(pid, &set)
	note("CPU affinity", err)
	if err == nil {
		for c := 0; c < len(set)*64; c++ {
			if set.IsSet(c) {
				in.affinity = append(in.affinity, c)
			}
		}
	}
	return in, first
}

// procLimits reads process pid's resource limits from /proc/PID/limits,
// which anyone may read: a line per limit in the kernel's order of
// resources (fs/proc/base.c, proc_pid_limits), after a header, as
// "%-25s %-20s %-20s %-10s", a value a number or "unlimited".
func procLimits(pid int, rl *[16]unix.Rlimit) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 1+len(rl) {
		return fmt.Errorf("/proc/%d/limits: %d lines", pid, len(lines))
	}
	const soft, hard, width = 26, 47, 20
	value := func(line string, at int) (uint64, error) {
		if len(line) < at {
			return 0, fmt.Errorf("/proc/%d/limits: short line %q", pid, line)
		}
		f := strings.TrimSpace(line[at:min(len(line), at+width)])
		if f == "unlimited" {
			return unix.RLIM_INFINITY, nil
		}
		return strconv.ParseUint(f, 10, 64)
	}
	for r := range rl {
		line := lines[1+r]
		if rl[r].Cur, err = value(line, soft); err != nil {
			return err
		}
		if rl[r].Max, err = value(line, hard); err != nil {
			return err
		}
	}
	return nil
}

func (in integrity) equal(o integrity) bool {
	return in.rlimits == o.rlimits && in.nice == o.nice && slices.Equal(in.affinity, o.affinity)
}

func (in integrity) diff(o integrity) string {
	var d []string
	for r := range in.rlimits {
		if in.rlimits[r] != o.rlimits[r] {
			d = append(d, fmt.Sprintf("rlimit %d %v (was %v)", r, in.rlimits[r], o.rlimits[r]))
		}
	}
	if in.nice != o.nice {
		d = append(d, fmt.Sprintf("priority %d (was %d)", in.nice, o.nice))
	}
	if !slices.Equal(in.affinity, o.affinity) {
		d = append(d, fmt.Sprintf("affinity %v (was %v)", in.affinity, o.affinity))
	}
	return strings.Join(d, ", ")
}

// clearDir removes everything inside dir, including entries a program made
// unwritable to itself.
func (a *Agent) clearDir(dir string) error {
	if err := a.checkPath(dir + "/x"); err != nil {
		return err
	}
	dir = a.hostPath(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			_ = filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
				if d != nil && d.IsDir() {
					_ = os.Chmod(q, 0o700)
				}
				return nil
			})
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("clear %s: %w", dir, err)
			}
		}
	}
	return nil
}
