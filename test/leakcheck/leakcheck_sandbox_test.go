// Package leakcheck runs after the whole suite (make test) and fails if any
// test left a sandbox behind: a cgroup, a process, a mount, a loop device
// or a runtime's state.
package leakcheck

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/testenv"
)

func TestNothingLeft(t *testing.T) {
	if os.Getenv("CORRAL_LEAKCHECK") != "1" {
		t.Skip("runs after the whole suite: make leakcheck (CORRAL_LEAKCHECK=1)")
	}
	// Dead sandbox inits are reparented to the host's init, which may reap
	// them a moment later; everything else must already be gone.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left = leftovers()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Error(l)
	}
}

func leftovers() []string {
	var left []string
	for _, child := range cgroup.Children("/" + testenv.CgroupParent) {
		left = append(left, "cgroup /"+testenv.CgroupParent+"/"+child)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte("/"+testenv.CgroupParent+"/")) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(p, "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		left = append(left, "process "+filepath.Base(p)+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	tmp := os.TempDir()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		if strings.HasPrefix(mp, tmp+"/") && (strings.Contains(mp, "/sandboxes/") || strings.HasSuffix(mp, "/null-netns")) {
			left = append(left, "mount "+mp)
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		b, _ := os.ReadFile(l)
		if s := strings.TrimSpace(string(b)); strings.HasPrefix(s, tmp+"/") && strings.Contains(s, "/sandboxes/") {
			left = append(left, "loop device "+strings.Split(l, "/")[3]+" backed by "+s)
		}
	}
	// Test binaries and throwaway PostgreSQL and Redis servers.
	dirs, _ := filepath.Glob(filepath.Join(tmp, "corral-test-*"))
	for _, d := range dirs {
		left = append(left, "test directory "+d)
	}
	return left
}
