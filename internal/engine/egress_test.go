package engine

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestEgressKeepsUmask starts and stops egress proxies while another
// goroutine creates files. The umask belongs to the whole process: a proxy
// that changed it, even for a moment, would give those files (and runc's
// and runsc's) modes nobody asked for.
func TestEgressKeepsUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)

	e := &Engine{cfg: DefaultConfig(), scratch: t.TempDir(), log: slog.New(slog.DiscardHandler)}
	job := &Job{Placement: Placement{Egress: []string{"example.com"}}}
	port := t.TempDir() // a sandbox's egress port
	dir := t.TempDir()
	stop := make(chan struct{})
	var created, wrong atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := filepath.Join(dir, strconv.Itoa(i))
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			fi, err := f.Stat()
			f.Close()
			os.Remove(p)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			created.Add(1)
			if fi.Mode().Perm() != 0o644 {
				wrong.Add(1)
			}
		}
	}()

	// Enough of both to overlap many times (the window was a bind call).
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; (i < 300 || created.Load() < 2000) && time.Now().Before(deadline); i++ {
		g, err := e.listenEgress(job, port)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		sock := filepath.Join(port, "proxy.sock")
		fi, err := os.Stat(sock)
		if err == nil && (fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o666) {
			err = errors.New("mode " + fi.Mode().String() + ", want a socket of mode 0666")
		}
		g.stop(job)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("%s: %v", sock, err)
		}
	}
	close(stop)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of %d files created meanwhile did not get the umask 022", n, created.Load())
	}
	if now := syscall.Umask(0o022); now != 0o022 {
		t.Errorf("umask %#o after the proxies, want 022", now)
	}
}
