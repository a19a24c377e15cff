package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresEnv names a PostgreSQL server (a URL whose user may create
// databases) that Postgres uses instead of starting its own.
const PostgresEnv = "CORRAL_TEST_POSTGRES"

// Postgres returns the URL of a new, empty database for t, dropped when t
// ends. The database lives on the server named by $CORRAL_TEST_POSTGRES,
// or else on a throwaway server this test process starts on first use
// (Debian's postgresql package, run as the "postgres" user when the test
// runs as root) and that StopPostgres stops; call it from TestMain.
func Postgres(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(PostgresEnv)
	if admin == "" {
		pg.once.Do(pg.start)
		Need(t, pg.missing == "", pg.missing)
		if pg.err != nil {
			t.Fatalf("start test postgres: %v", pg.err)
		}
		admin = pg.url
	}
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s: want a postgres:// URL", PostgresEnv)
	}
	b := make([]byte, 8)
	rand.Read(b)
	name := "corral_test_" + hex.EncodeToString(b)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgAdminExec(ctx, admin, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE (PostgreSQL 13+) ends sessions a test left open.
		err := pgAdminExec(ctx, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		if err != nil {
			err = pgAdminExec(ctx, admin, "DROP DATABASE IF EXISTS "+name)
		}
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func pgAdminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// StopPostgres stops the server Postgres started, if any, and removes its
// files. Call it from TestMain after m.Run.
func StopPostgres() {
	pg.stop()
}

// pg is this test process's throwaway server.
var pg pgServer

type pgServer struct {
	once    sync.Once
	missing string // a prerequisite that is not there
	err     error
	url     string

	mu   sync.Mutex
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the server has exited
}

const pgDirPrefix = "corral-test-pg-"

func (s *pgServer) start() {
	bin := pgBin()
	if bin == "" {
		s.missing = "PostgreSQL server binaries (/usr/lib/postgresql/*/bin) not found: run scripts/deps.sh or set " + PostgresEnv
		return
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			s.missing = `no "postgres" user to run PostgreSQL as (root is refused): run scripts/deps.sh`
			return
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			s.err = fmt.Errorf("user postgres: %w", err)
			return
		}
		// No supplementary groups: root's are not postgres's.
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	pgRemoveStale()
	s.err = s.startIn(bin, cred)
	if s.err != nil {
		s.stop()
	}
}

func (s *pgServer) startIn(bin string, cred *syscall.Credential) error {
	dir, err := os.MkdirTemp("", pgDirPrefix)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.dir = dir
	s.mu.Unlock()
	// The owner file lets a later test process tell a directory this one
	// left behind (it was killed) from one in use.
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	password := hex.EncodeToString(pw)
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return err
	}
	if cred != nil {
		for _, p := range []string{dir, pwfile} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--pwfile", pwfile,
		"--auth-local", "trust", "--auth-host", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync")
	initdb.Dir = dir
	initdb.Env = pgEnviron(bin)
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb in %s: %w\n%s", dir, err, out)
	}
	os.Remove(pwfile)

	// Another process may take the free port before the server binds it:
	// then try another.
	for attempt := 1; ; attempt++ {
		port, err := pgFreePort()
		if err != nil {
			return err
		}
		s.url = fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port)
		err = s.run(bin, cred, dir, data, port)
		if err == nil {
			err = s.waitReady(port)
		}
		if err == nil || attempt == 5 || !errors.Is(err, errPortTaken) {
			return err
		}
	}
}

// run starts the server in the background.
func (s *pgServer) run(bin string, cred *syscall.Credential, dir, data string, port int) error {
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own copy
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(port),
		"-c", "unix_socket_directories="+dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off",
		"-c", "max_connections=200")
	cmd.Dir = dir
	cmd.Env = pgEnviron(bin)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		// Its own process group, so a ^C to the test reaches StopPostgres
		// first; and SIGQUIT (immediate shutdown, which also ends the
		// backends) if the test process dies without stopping it.
		Setpgid:   true,
		Pdeathsig: syscall.SIGQUIT,
	}
	done := make(chan struct{})
	started := make(chan error)
	go func() {
		// Pdeathsig fires when the thread that started the child exits,
		// not the process: keep this thread for as long as the server runs.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

func (s *pgServer) waitReady(port int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := pgAdminExec(ctx, s.url, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			err := fmt.Errorf("postgres on port %d exited: %s\n%s", port, s.cmd.ProcessState, out)
			if portTaken(port) {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready after a minute: %w", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RestartPostgres restarts the server Postgres started, on the same port
// and data, as an operator or a failover would: a fast shutdown (SIGINT:
// every connection is cut, open transactions roll back, committed ones
// are flushed). Not an immediate one: the test server runs with
// synchronous_commit=off, which loses the last commits in a crash by
// design.
func RestartPostgres(t testing.TB) {
	t.Helper()
	s := &pg
	s.mu.Lock()
	cmd, done, dir := s.cmd, s.done, s.dir
	s.mu.Unlock()
	if cmd == nil {
		t.Fatal("RestartPostgres: no PostgreSQL of this test process (" + PostgresEnv + " is set, or Postgres was not called)")
	}
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if !pgExited(done, 30*time.Second) {
		cmd.Process.Kill()
		<-done
	}
	var cred *syscall.Credential
	if cmd.SysProcAttr != nil {
		cred = cmd.SysProcAttr.Credential
	}
	for attempt := 0; ; attempt++ {
		err := s.run(pgBin(), cred, dir, filepath.Join(dir, "data"), port)
		if err == nil {
			err = s.waitReady(port)
		}
		if err == nil {
			return
		}
		if attempt == 10 {
			t.Fatalf("restart postgres: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func pgExited(done <-chan struct{}, wait time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

func (s *pgServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		// SIGINT is a fast shutdown; SIGQUIT an immediate one.
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
			s.cmd.Process.Signal(sig)
			if pgExited(s.done, 10*time.Second) {
				break
			}
		}
		s.cmd = nil
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// pgBin returns the newest /usr/lib/postgresql/*/bin with initdb and
// postgres, or the directory of an initdb on PATH.
func pgBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int {
		return int(version(b)*100) - int(version(a)*100)
	})
	for _, d := range dirs {
		if pgIsFile(filepath.Join(d, "initdb")) && pgIsFile(filepath.Join(d, "postgres")) {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && pgIsFile(filepath.Join(filepath.Dir(p), "postgres")) {
		return filepath.Dir(p)
	}
	return ""
}

func pgIsFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func pgEnviron(bin string) []string {
	return []string{"PATH=" + bin + ":/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
}

// errPortTaken: the server exited and another process holds its port.
var errPortTaken = errors.New("the port was taken")

// portTaken reports whether another process listens on port now.
func portTaken(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return errors.Is(err, syscall.EADDRINUSE)
	}
	l.Close()
	return false
}

func pgFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pgRemoveStale removes what killed test processes left: their
// server directories and, should one have outlived its test, the server.
func pgRemoveStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pgDirPrefix+"*"))
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			// Being created right now, or older than owner files.
			if fi, err := os.Stat(dir); err != nil || time.Since(fi.ModTime()) < time.Hour {
				continue
			}
		} else if pid, err := strconv.Atoi(string(owner)); err != nil || pgAlive(pid) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			first, _, _ := bytes.Cut(b, []byte("\n"))
			// The pid may since belong to another process: only a postgres
			// of this directory is ended.
			pid, err := strconv.Atoi(string(first))
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err == nil && pgAlive(pid) && bytes.Contains(cmdline, []byte(dir)) {
				syscall.Kill(pid, syscall.SIGQUIT)
				time.Sleep(time.Second)
			}
		}
		os.RemoveAll(dir)
	}
}

func pgAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) != syscall.ESRCH
}
