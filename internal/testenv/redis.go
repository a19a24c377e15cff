package testenv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RedisServer is the Debian redis-server that scripts/deps.sh installs.
const RedisServer = "/usr/bin/redis-server"

var redisSrv struct {
	once sync.Once
	url  string
	err  error
	dir  string
	cmd  *exec.Cmd
	// exited is closed when cmd has been waited for.
	exited chan struct{}
}

// Redis returns a redis:// URL for t with a fresh key prefix of its own
// (the prefix= option that state/redis reads); the prefix's keys are
// deleted when t ends. The server is CORRAL_TEST_REDIS when set, otherwise
// a throwaway redis-server without persistence that this test process
// starts on first use; test mains stop it with StopRedis.
func Redis(t testing.TB) string {
	t.Helper()
	base := os.Getenv("CORRAL_TEST_REDIS")
	if base == "" {
		_, err := os.Stat(RedisServer)
		Need(t, err == nil, RedisServer+" missing: run scripts/deps.sh")
		redisSrv.once.Do(startRedis)
		if redisSrv.err != nil {
			t.Fatalf("start redis-server: %v", redisSrv.err)
		}
		base = redisSrv.url
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("CORRAL_TEST_REDIS: %v", err)
	}
	q := u.Query()
	prefix := q.Get("prefix") + "corraltest:" + rand.Text() + ":"
	q.Del("prefix")
	u.RawQuery = q.Encode()
	server := u.String()
	t.Cleanup(func() {
		if err := deletePrefix(server, prefix); err != nil {
			t.Errorf("delete test keys %s*: %v", prefix, err)
		}
	})
	q.Set("prefix", prefix)
	u.RawQuery = q.Encode()
	return u.String()
}

// deletePrefix removes every key under prefix.
func deletePrefix(server, prefix string) error {
	opt, err := goredis.ParseURL(server)
	if err != nil {
		return err
	}
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	for chunk := range slices.Chunk(keys, 1000) {
		if err := rdb.Unlink(ctx, chunk...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// globEscape quotes the characters Redis's MATCH treats as patterns.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\*?[]^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// startRedis starts the throwaway server, retrying on another port if the
// free one it picked was taken meanwhile.
func startRedis() {
	dir, err := os.MkdirTemp("", "corral-test-redis-")
	if err != nil {
		redisSrv.err = err
		return
	}
	redisSrv.dir = dir
	var errs []error
	for range 3 {
		if err := tryRedis(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		return
	}
	redisSrv.err = errors.Join(errs...)
}

func tryRedis(dir string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	return runRedis(dir, port)
}

// runRedis starts redis-server on port and waits until it answers.
func runRedis(dir, port string) error {
	logPath := filepath.Join(dir, "redis-"+port+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(RedisServer,
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the thread that started it; Go keeps threads of
	// unlocked goroutines alive for the life of the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	serverURL := "redis://127.0.0.1:" + port + "/0"
	if err := waitRedis(serverURL, exited); err != nil {
		cmd.Process.Kill()
		<-exited
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("port %s: %w\n%s", port, err, out)
	}
	redisSrv.cmd, redisSrv.exited, redisSrv.url = cmd, exited, serverURL
	return nil
}

// waitRedis polls until the server answers PING, exits, or 10 s pass.
func waitRedis(serverURL string, exited <-chan struct{}) error {
	opt, err := goredis.ParseURL(serverURL)
	if err != nil {
		return err
	}
	opt.MaxRetries = -1
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING: %w", err)
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// RestartRedis kills the server Redis started (SIGKILL, as a crash would)
// and starts a new one on the same port. The server keeps nothing on disk:
// every key is gone.
func RestartRedis(t testing.TB) {
	t.Helper()
	if redisSrv.cmd == nil {
		t.Fatal("RestartRedis: no redis-server of this test process (CORRAL_TEST_REDIS is set, or Redis was not called)")
	}
	u, err := url.Parse(redisSrv.url)
	if err != nil {
		t.Fatal(err)
	}
	redisSrv.cmd.Process.Kill()
	<-redisSrv.exited
	redisSrv.cmd = nil
	// The port was just released; retry briefly if the kernel holds it.
	for attempt := 0; ; attempt++ {
		err := runRedis(redisSrv.dir, u.Port())
		if err == nil {
			return
		}
		if attempt == 20 {
			t.Fatalf("restart redis-server: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopRedis kills the server Redis started, if any, and removes its
// directory; call it from TestMain after m.Run.
func StopRedis() {
	if redisSrv.cmd != nil {
		redisSrv.cmd.Process.Kill()
		<-redisSrv.exited
		redisSrv.cmd = nil
	}
	if redisSrv.dir != "" {
		os.RemoveAll(redisSrv.dir)
		redisSrv.dir = ""
	}
}
