package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRunscBuilding: a build is in progress exactly while a process holds
// the lock; one that died leaves nothing pending, and looking never stops
// a build from taking the lock.
func TestRunscBuilding(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, "runsc.lock")
	if runscBuilding(lock) {
		t.Error("no lock file: building")
	}
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if runscBuilding(lock) {
		t.Error("a free lock: building")
	}

	// A build: other processes hold the lock, as scripts/deps.sh's build
	// and its children do.
	build := exec.Command("bash", "-c", `exec 9>"$1"; flock 9; sleep 60`, "build", lock)
	build.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := build.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { syscall.Kill(-build.Process.Pid, syscall.SIGKILL); build.Wait() }
	t.Cleanup(kill)
	for deadline := time.Now().Add(10 * time.Second); !runscBuilding(lock); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a held lock is not seen as a build")
		}
	}
	// The build dies: the kernel drops its lock once the last process
	// holding it (bash's child sleep shares the open file) has exited,
	// which SIGKILL to the group makes happen soon but not at once.
	kill()
	for deadline := time.Now().Add(10 * time.Second); runscBuilding(lock); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a dead build is still building after 10 s")
		}
	}

	// Looking leaves the lock free for the next build.
	runscBuilding(lock)
	f, err := os.OpenFile(lock, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("lock after a look: %v", err)
	}
	// Held here, through another open file: still a build.
	if !runscBuilding(lock) {
		t.Error("a lock held by this process is not seen")
	}
}
