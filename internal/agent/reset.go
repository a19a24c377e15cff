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
		z.mu.Lock()
		z.tag++
		tag := z.tag
		z.mu.Unlock()
		if _, err := z.call(tag, zygoteMsg{Ping: tag}, zygoteTimeout); err != nil {
			return fmt.Errorf("reset: zygote %d: %w", z.proc.pid, err)
		}
	}
	return nil
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

func readIntegrity() integrity {
	var in integrity
	for r := range in.rlimits {
		_ = unix.Getrlimit(r, &in.rlimits[r])
	}
	in.nice, _ = unix.Getpriority(unix.PRIO_PROCESS, 0)
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		for c := 0; c < len(set)*64; c++ {
			if set.IsSet(c) {
				in.affinity = append(in.affinity, c)
			}
		}
	}
	return in
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
