// Package leakcheck finds what tests left of their sandboxes: a cgroup, a
// process, a mount, a loop device or a test directory. make leakcheck runs
// TestNothingLeft after the whole suite and fails on any; make sweep runs
// before it and removes what an earlier run, killed half-way, left, so a
// machine that ran a killed suite does not fail the next one's check.
package leakcheck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/disk"
	"github.com/corralhq/corral/internal/testenv"
)

// Kind is what a Leftover is.
type Kind string

const (
	Cgroup  Kind = "cgroup"
	Process Kind = "process"
	Mount   Kind = "mount"
	Loop    Kind = "loop device"
	Dir     Kind = "test directory"
)

// Leftover is one thing a test left: Path is the cgroup, mount point, test
// directory, /dev/loopN or process id.
type Leftover struct {
	Kind Kind
	Path string
	// Detail says more for a person: a process's command line, a loop
	// device's backing file.
	Detail string
}

func (l Leftover) String() string {
	if l.Detail == "" {
		return string(l.Kind) + " " + l.Path
	}
	return string(l.Kind) + " " + l.Path + ": " + l.Detail
}

// Find lists what tests left: processes and cgroups under the tests'
// cgroup parent, mounts and loop devices of sandboxes in the temporary
// directory, and the directories of test binaries and throwaway servers.
func Find() []Leftover {
	var left []Leftover
	parent := "/" + testenv.CgroupParent
	for _, child := range cgroup.Children(parent) {
		left = append(left, Leftover{Kind: Cgroup, Path: parent + "/" + child, Detail: cgroupDetail(parent + "/" + child)})
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(parent+"/")) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(p, "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		left = append(left, Leftover{Kind: Process, Path: filepath.Base(p), Detail: strings.ReplaceAll(string(cmd), "\x00", " ")})
	}
	tmp := os.TempDir()
	for _, mp := range mountPoints() {
		if strings.HasPrefix(mp, tmp+"/") && (strings.Contains(mp, "/sandboxes/") || strings.HasSuffix(mp, "/null-netns")) {
			left = append(left, Leftover{Kind: Mount, Path: mp})
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		b, _ := os.ReadFile(l)
		if s := strings.TrimSpace(string(b)); strings.HasPrefix(s, tmp+"/") && strings.Contains(s, "/sandboxes/") {
			left = append(left, Leftover{Kind: Loop, Path: "/dev/" + strings.Split(l, "/")[3], Detail: "backed by " + s})
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, "corral-test-*"))
	for _, d := range dirs {
		left = append(left, Leftover{Kind: Dir, Path: d})
	}
	return left
}

// cgroupDetail says in which hierarchies the cgroup at path is left and
// when it was made, to find in the lanes' test-timings/*.json the test that
// ran then.
func cgroupDetail(path string) string {
	var in []string
	var made time.Time
	for _, d := range cgroup.Dirs(path) {
		fi, err := os.Stat(d)
		if err != nil {
			continue
		}
		name := "cgroup2"
		if !cgroup.Unified() {
			name = filepath.Base(strings.TrimSuffix(d, path))
		}
		in = append(in, name)
		if made.IsZero() || fi.ModTime().Before(made) {
			made = fi.ModTime()
		}
	}
	return fmt.Sprintf("in %s, made %s", strings.Join(in, ", "), made.UTC().Format("15:04:05.000 UTC"))
}

// Sweep removes what Find lists: it kills the processes, unmounts the
// mounts, detaches the loop devices, removes the cgroups and the test
// directories, and the test's temporary directory that held a sandbox's
// mount or disk. It returns what it removed and what it could not. Only
// for a machine where no suite is running: it takes whatever a test left.
func Sweep() ([]Leftover, error) {
	left := Find()
	var errs []error
	tmp := os.TempDir()
	roots := map[string]bool{}
	// A test's temporary directory is the first element under tmp
	// (t.TempDir's /tmp/TestName123/001).
	root := func(p string) {
		if rel, err := filepath.Rel(tmp, p); err == nil && !strings.HasPrefix(rel, "..") {
			roots[filepath.Join(tmp, strings.Split(rel, string(filepath.Separator))[0])] = true
		}
	}
	for _, l := range left {
		if l.Kind == Process {
			if pid, err := strconv.Atoi(l.Path); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	for _, l := range left {
		if l.Kind == Cgroup {
			if err := cgroup.Kill(l.Path, 10*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// A mount point may be mounted over several times (runsc's null-netns
	// once per sandbox): unmount until it is not.
	for _, l := range left {
		if l.Kind != Mount {
			continue
		}
		root(l.Path)
		for range 64 {
			if err := disk.Unmount(l.Path); err != nil {
				errs = append(errs, err)
				break
			}
			if !slices.Contains(mountPoints(), l.Path) {
				break
			}
		}
	}
	for _, l := range left {
		if l.Kind != Loop {
			continue
		}
		root(strings.TrimSuffix(strings.TrimPrefix(l.Detail, "backed by "), " (deleted)"))
		if err := detachLoop(l.Path); err != nil {
			errs = append(errs, err)
		}
	}
	for _, l := range left {
		if l.Kind == Cgroup {
			if err := cgroup.Remove(l.Path); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", l.Path, err))
			}
		}
	}
	for _, l := range left {
		if l.Kind == Dir {
			roots[l.Path] = true
		}
	}
	for r := range roots {
		if err := os.RemoveAll(r); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", r, err))
		}
	}
	return left, errors.Join(errs...)
}

// mountPoints lists this mount namespace's mount points, one per mount
// (a point mounted over twice is listed twice).
func mountPoints() []string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			out = append(out, f[4])
		}
	}
	return out
}

// detachLoop detaches a loop device that still has a backing file once its
// mounts are gone (an autoclear device has detached itself by then).
func detachLoop(dev string) error {
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	for range 50 {
		if _, err := os.Stat(backing); err != nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	return nil
}
