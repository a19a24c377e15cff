// Package sandboxes tests live sandboxes through a real corral serve on
// runc, over HTTP and through the Go SDK: background processes that serve
// others in the same sandbox, stdin, signals, output replayed to a second
// client, large files in bounded memory, timeouts that leave nothing, and
// the curl and Go examples of docs/sandboxes.md.
package sandboxes

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fastReap makes an expired sandbox go within a fraction of a second.
const fastReap = `
[sessions]
reap_interval = "200ms"
`

func client(s *testserver.Server) *sandbox.Client {
	return sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute})
}

// TestProcesses: a python http.server started in the background answers
// curl from a second process of the same sandbox; stdin goes through cat
// and back; SIGTERM ends a process with status 143; a second client that
// connects after the end reads the whole output; the list shows them all.
func TestProcesses(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	for _, tier := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		t.Run(string(tier), func(t *testing.T) { testProcesses(t, s, tier) })
	}
}

func testProcesses(t *testing.T, s *testserver.Server, tier sandbox.Isolation) {
	c := client(s)
	ctx := t.Context()
	sb, info, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: tier,
		TimeoutSeconds: 600, Metadata: map[string]string{"test": "processes-" + string(tier)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	if info.Tier != string(tier) || info.State != "running" {
		t.Errorf("created %+v", info)
	}
	server, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"python3", "-m", "http.server", "8000"},
		Cwd: "/workspace", Tag: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files().Write(ctx, "index.html", strings.NewReader("served from the sandbox\n")); err != nil {
		t.Fatal(err)
	}
	// The server takes a moment to listen: curl retries on refusal.
	out, errOut, exit, err := sb.Run(ctx, sandbox.StartProcessRequest{
		Shell: "curl -sS --retry 50 --retry-connrefused --retry-delay 0 --retry-max-time 30 http://127.0.0.1:8000/index.html"})
	if err != nil || exit.ExitCode != 0 || string(out) != "served from the sandbox\n" {
		t.Fatalf("curl: %q %q %+v %v", out, errOut, exit, err)
	}

	cat, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("round trip \x00\xff\n")
	if err := cat.WriteStdin(ctx, bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	if err := cat.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	var echoed []byte
	for ev, err := range cat.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == sandbox.ProcessEventStdout {
			echoed = append(echoed, ev.Data...)
		}
	}
	if !bytes.Equal(echoed, payload) {
		t.Errorf("cat gave back %q, want %q", echoed, payload)
	}

	sleeper, err := sb.Start(ctx, sandbox.StartProcessRequest{Shell: "echo ready; exec sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	// Signalled once it runs sleep (bash says so first): a login shell
	// still starting would end by the signal before its echo.
	for ev, err := range sleeper.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == sandbox.ProcessEventStdout {
			break
		}
	}
	if err := sleeper.Signal(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	end, err := sleeper.Wait(ctx)
	if err != nil || end.ExitCode != 143 || end.Signal != "SIGTERM" {
		t.Errorf("after SIGTERM: %+v, %v; want 143 SIGTERM", end, err)
	}
	// A second client, after the end, through a handle of its own.
	other := client(s).Sandbox(sb.ID).Process(sleeper.PID)
	var replay []string
	for ev, err := range other.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		replay = append(replay, ev.Type+":"+ev.Text)
	}
	if got := strings.Join(replay, ","); got != "start:,stdout:ready\n,end:" {
		t.Errorf("replayed %s", got)
	}
	procs, err := sb.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	running := map[int]bool{}
	for _, p := range procs {
		running[p.PID] = p.Running
	}
	if !running[server.PID] || running[cat.PID] || running[sleeper.PID] || len(procs) != 4 {
		t.Errorf("processes %+v: want the server running, the other three ended", procs)
	}
	// A terminal: tty names it, stty size follows a resize.
	term, err := sb.Start(ctx, sandbox.StartProcessRequest{Shell: "tty; stty size; read; stty size",
		PTY: &sandbox.PTYSize{Cols: 100, Rows: 30}})
	if err != nil {
		t.Fatal(err)
	}
	var screen []byte
	for ev, err := range term.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		screen = append(screen, ev.Data...)
		if bytes.Contains(screen, []byte("30 100")) {
			break
		}
	}
	if !bytes.Contains(screen, []byte("/dev/pts/")) {
		t.Errorf("tty on a PTY: %q", screen)
	}
	if err := term.Resize(ctx, sandbox.PTYSize{Cols: 132, Rows: 50}); err != nil {
		t.Fatal(err)
	}
	if err := term.WriteStdin(ctx, strings.NewReader("\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := term.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	screen = nil
	for ev, err := range term.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		screen = append(screen, ev.Data...)
	}
	if !bytes.Contains(screen, []byte("50 132")) {
		t.Errorf("stty size after a resize: %q", screen)
	}
	// A watch reports a file a process creates.
	if _, err := sb.Files().MakeDir(ctx, "watched", false); err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() {
		for ev, err := range sb.Files().Watch(wctx, "watched", true) {
			if err != nil {
				watchDone <- err
				return
			}
			if ev.Op == "create" && ev.Path == "/workspace/watched/made.txt" {
				watchDone <- nil
				return
			}
		}
		watchDone <- errors.New("the watch ended without the file's creation")
	}()
	// Made until the watch sees it: the watch may not be on at the first.
	for i := 0; ; i++ {
		if _, _, _, err := sb.Run(ctx, sandbox.StartProcessRequest{Shell: "rm -f watched/made.txt; echo x > watched/made.txt"}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-watchDone:
			if err != nil {
				t.Errorf("watch: %v", err)
			}
		case <-time.After(time.Second):
			if i < 30 {
				continue
			}
			t.Errorf("no create event for a file a process made")
		}
		break
	}
	stopWatch()

	// An execution of the sandbox runs beside the server, and leaves it.
	res, err := c.Execute(ctx, sandbox.ExecuteRequest{SessionID: sb.ID, Language: "python",
		Code: "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:8000/index.html').read().decode(), end='')"})
	if err != nil || res.Stdout != "served from the sandbox\n" || res.Tier != string(tier) {
		t.Errorf("an execution in the sandbox: %q on %s, %v; want the page, on the sandbox's tier", res.Stdout, res.Tier, err)
	}
	if p, err := server.Info(ctx); err != nil || !p.Running {
		t.Errorf("the server after an execution: %+v, %v", p, err)
	}
	// Listed by its metadata, and not by another's.
	if l, err := c.ListSandboxes(ctx, map[string]string{"test": "processes-" + string(tier)}); err != nil || len(l) != 1 || l[0].SandboxID != sb.ID {
		t.Errorf("list by metadata: %+v, %v", l, err)
	}
	if l, err := c.ListSandboxes(ctx, map[string]string{"test": "other"}); err != nil || len(l) != 0 {
		t.Errorf("list by other metadata: %+v, %v", l, err)
	}
	beta := sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: testserver.BetaKey})
	if _, err := beta.Sandbox(sb.ID).Info(ctx); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another tenant's Info: %v, want not found", err)
	}
	if _, err := beta.Sandbox(sb.ID).Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another tenant's Start: %v, want not found", err)
	}
}

// TestLargeFiles: 100 MB up and down with equal digests, while corral's
// memory grows by less than 64 MB.
func TestLargeFiles(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	c := client(s)
	ctx := t.Context()
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer,
		Limits: sandbox.SandboxLimits{DiskMB: 512}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	const size = 100 << 20
	before := s.PeakRSS()
	up := sha256.New()
	f, err := sb.Files().Write(ctx, "/workspace/big.bin", io.TeeReader(io.LimitReader(rand.Reader, size), up))
	if err != nil || f.Size != size {
		t.Fatalf("upload: %+v, %v", f, err)
	}
	down := sha256.New()
	if err := sb.Files().Read(ctx, "big.bin", down); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Errorf("the download's digest differs from the upload's")
	}
	growth := s.PeakRSS() - before
	t.Logf("corral's peak RSS grew by %d MiB over a 100 MiB upload and download", growth>>20)
	if growth >= 64<<20 {
		t.Errorf("corral's peak RSS grew by %d MiB, want under 64", growth>>20)
	}
}

// TestTimeoutLeavesNothing: a sandbox past its timeout answers not found,
// and the reaper leaves no sandbox, disk or session directory of it; one
// whose timeout was extended before lives on.
func TestTimeoutLeavesNothing(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true, Config: fastReap})
	c := client(s)
	ctx := t.Context()
	kept, info, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer, TimeoutSeconds: 2})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := kept.SetTimeout(ctx, 10*time.Minute)
	if err != nil || !ext.ExpiresAt.After(info.ExpiresAt.Add(9*time.Minute)) {
		t.Fatalf("SetTimeout = %+v, %v", ext, err)
	}
	// Made after the first: its timeout passes after the first's old one.
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer, TimeoutSeconds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	if dirs, _ := oci.SandboxDirs(s.Data); len(dirs) != 2 {
		t.Fatalf("%d sandboxes while both live, want 2", len(dirs))
	}
	left := func() (int, int) {
		dirs, _ := oci.SandboxDirs(s.Data)
		sessions, _ := filepath.Glob(filepath.Join(s.Data, "sessions", "*", "*"))
		return len(dirs), len(sessions)
	}
	if !testenv.Eventually(t, time.Minute, func() bool {
		_, err := sb.Info(ctx)
		d, s := left()
		return errors.Is(err, sandbox.ErrNotFound) && d == 1 && s == 1
	}) {
		d, s := left()
		t.Fatalf("after its timeout: %d sandboxes and %d session directories, want the extended one's alone", d, s)
	}
	if _, err := kept.Info(ctx); err != nil {
		t.Errorf("the extended sandbox past its first timeout: %v", err)
	}
	if err := kept.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if d, s := left(); d != 0 || s != 0 {
		t.Errorf("after Kill: %d sandboxes and %d session directories", d, s)
	}
}

// TestHTTPErrors: the answers of the HTTP API for requests that cannot be
// served name what is wrong.
func TestHTTPErrors(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	for _, tc := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"POST", "/v1/sandboxes", map[string]any{"tier": "vm"}, http.StatusBadRequest},
		{"POST", "/v1/sandboxes", map[string]any{"limits": map[string]any{"pids": 1}}, http.StatusBadRequest},
		{"POST", "/v1/sandboxes", map[string]any{"unknown": 1}, http.StatusBadRequest},
		{"GET", "/v1/sandboxes/nope", nil, http.StatusNotFound},
		{"POST", "/v1/sandboxes/nope/processes", map[string]any{"cmd": []string{"true"}}, http.StatusNotFound},
		{"GET", "/v1/sandboxes/nope/processes/1/events", nil, http.StatusNotFound},
		{"GET", "/v1/sandboxes?metadata=novalue", nil, http.StatusBadRequest},
	} {
		if code, raw := s.Call(testserver.AlphaKey, tc.method, tc.path, tc.body, nil); code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, code, raw, tc.want)
		}
	}
	var info sandbox.Info
	if code, raw := s.Call(testserver.AlphaKey, "POST", "/v1/sandboxes", map[string]any{"sandbox_id": "dup", "tier": "container"}, &info); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, raw)
	}
	defer s.Call(testserver.AlphaKey, "DELETE", "/v1/sandboxes/dup", nil, nil)
	for _, tc := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"POST", "/v1/sandboxes", map[string]any{"sandbox_id": "dup"}, http.StatusConflict},
		{"POST", "/v1/sandboxes/dup/processes", map[string]any{"cmd": []string{"no-such-program"}}, http.StatusBadRequest},
		{"POST", "/v1/sandboxes/dup/processes", map[string]any{"cmd": []string{"true"}, "pty": map[string]int{"cols": 80}}, http.StatusBadRequest},
		{"POST", "/v1/sandboxes/dup/contexts", map[string]any{"language": "cobol"}, http.StatusBadRequest},
		{"POST", "/v1/sandboxes/dup/contexts", map[string]any{"unknown": 1}, http.StatusBadRequest},
		{"POST", "/v1/sandboxes/dup/contexts/nope/run", map[string]any{"code": "1"}, http.StatusNotFound},
		{"POST", "/v1/sandboxes/dup/contexts/nope/run", map[string]any{"code": "1", "timeout_seconds": -1}, http.StatusBadRequest},
		{"DELETE", "/v1/sandboxes/dup/contexts/nope", nil, http.StatusNotFound},
		{"POST", "/v1/sandboxes/nope/contexts", map[string]any{}, http.StatusNotFound},
		{"GET", "/v1/sandboxes/dup/files?path=/proc/self/environ", nil, http.StatusBadRequest},
		{"GET", "/v1/sandboxes/dup/files?path=missing.txt", nil, http.StatusNotFound},
		{"GET", "/v1/sandboxes/dup/processes/999999", nil, http.StatusNotFound},
		{"POST", "/v1/sandboxes/dup/timeout", map[string]any{"timeout_seconds": 0}, http.StatusBadRequest},
	} {
		if code, raw := s.Call(testserver.AlphaKey, tc.method, tc.path, tc.body, nil); code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, code, raw, tc.want)
		}
	}
}

// poolStats reads the warm pool's counters from /v1/stats.
func poolStats(t *testing.T, s *testserver.Server) (idle, hits int) {
	t.Helper()
	var st struct {
		Pool []struct {
			Idle int `json:"idle"`
			Hits int `json:"hits"`
		} `json:"pool"`
	}
	if code, raw := s.Call(testserver.AlphaKey, "GET", "/v1/stats?window=1h", nil, &st); code != http.StatusOK {
		t.Fatalf("stats: %d %s", code, raw)
	}
	for _, p := range st.Pool {
		idle += p.Idle
		hits += p.Hits
	}
	return idle, hits
}

// TestFromPool: a live sandbox that matches the warm pool (python on the
// container tier, the default class) takes a ready sandbox, whose disk
// becomes its own; it works as any other and leaves nothing when killed.
func TestFromPool(t *testing.T) {
	s := testserver.Start(t, testserver.Options{})
	c := client(s)
	ctx := t.Context()
	if !testenv.Eventually(t, time.Minute, func() bool { idle, _ := poolStats(t, s); return idle > 0 }) {
		t.Fatal("the warm pool never filled")
	}
	_, before := poolStats(t, s)
	start := time.Now()
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: sandbox.IsolationContainer})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created from the pool in %v", time.Since(start).Round(time.Millisecond))
	if _, after := poolStats(t, s); after != before+1 {
		t.Errorf("pool hits %d → %d, want one more", before, after)
	}
	if _, err := sb.Files().Write(ctx, "kept.txt", strings.NewReader("on the taken disk")); err != nil {
		t.Fatal(err)
	}
	out, _, exit, err := sb.Run(ctx, sandbox.StartProcessRequest{Cmd: []string{"cat", "/workspace/kept.txt"}})
	if err != nil || exit.ExitCode != 0 || string(out) != "on the taken disk" {
		t.Errorf("cat: %q %+v %v", out, exit, err)
	}
	sessions, _ := filepath.Glob(filepath.Join(s.Data, "sessions", "*", sb.ID, "disk.img"))
	if len(sessions) != 1 {
		t.Errorf("the taken sandbox's disk is not the sandbox's own: %v", sessions)
	}
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(s.Data, "sessions", "*", sb.ID)); len(left) != 0 {
		t.Errorf("after Kill: %v", left)
	}
}

// TestNodeRestart: a node's restart loses its live sandboxes' processes,
// not the sandboxes: the next call makes each again on its disk, its
// files there, and counts a restart.
func TestNodeRestart(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	c := client(s)
	ctx := t.Context()
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer, TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	if _, err := sb.Files().Write(ctx, "state.txt", strings.NewReader("before the restart")); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	out, _, exit, err := sb.Run(ctx, sandbox.StartProcessRequest{Cmd: []string{"cat", "state.txt"}})
	if err != nil || exit.ExitCode != 0 || string(out) != "before the restart" {
		t.Fatalf("after the restart: %q %+v %v", out, exit, err)
	}
	procs, err := sb.Processes(ctx)
	if err != nil || len(procs) != 1 || procs[0].Cmd[0] != "cat" {
		t.Errorf("processes after the restart: %+v, %v; want the new one alone", procs, err)
	}
	if info, err := sb.Info(ctx); err != nil || info.Restarts != 1 {
		t.Errorf("after the restart: %+v, %v; want 1 restart", info, err)
	}
}

// TestSandboxesApart: a process of one sandbox sees nothing of another's.
func TestSandboxesApart(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	c := client(s)
	ctx := t.Context()
	var boxes []*sandbox.Sandbox
	for range 2 {
		sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: sandbox.IsolationContainer})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Kill(context.Background())
		boxes = append(boxes, sb)
	}
	if _, err := boxes[0].Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"sleep", "4242"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := boxes[0].Files().Write(ctx, "/tmp/mine", strings.NewReader("a's")); err != nil {
		t.Fatal(err)
	}
	out, _, _, err := boxes[1].Run(ctx, sandbox.StartProcessRequest{
		Shell: "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo; ls /tmp /workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("4242")) || bytes.Contains(out, []byte("mine")) {
		t.Errorf("sandbox b sees a's process or file:\n%s", out)
	}
}
