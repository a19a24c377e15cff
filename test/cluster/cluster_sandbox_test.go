// Package cluster tests several corral serve nodes on one PostgreSQL and
// one Redis: a session made on one node used through the others, and what
// its callers see when that node dies.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// clusterConfig makes nodes notice a lost one within seconds.
const clusterConfig = `
[cluster]
heartbeat = "500ms"
lost_after = "5s"
`

// startNodes starts a node for each set of flags, named node-a, node-b,
// ... on one PostgreSQL and one Redis.
func startNodes(t *testing.T, flags ...[]string) []*testserver.Server {
	storeURL, stateURL := testenv.Postgres(t), testenv.Redis(t)
	var out []*testserver.Server
	for i, f := range flags {
		name := "node-" + string(rune('a'+i))
		out = append(out, testserver.Start(t, testserver.Options{Store: storeURL, State: stateURL, NoPool: true,
			Config: clusterConfig, Extra: append([]string{"--node-id", name}, f...)}))
	}
	return out
}

func client(s *testserver.Server, key string) *sandbox.Client {
	return sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: key, Timeout: 2 * time.Minute})
}

// call sends a raw request and returns the status, the error body's code
// and message.
func call(t *testing.T, s *testserver.Server, method, path string) (int, string, string) {
	t.Helper()
	status, e := rawCall(t, s, method, path)
	return status, e.Code, e.Message
}

// TestSessionAcrossNodes: a session made on node A is used through B and C
// — executions and file calls — as it would be on A; another tenant cannot
// reach it through any node; once A is killed, calls for it through B and
// C answer at once with an error that names the session (503 while A may
// come back, 410 once it is lost), never a hang.
func TestSessionAcrossNodes(t *testing.T) {
	nodes := startNodes(t, nil, nil, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx := t.Context()
	ca, cb, cc := client(a, testserver.AlphaKey), client(b, testserver.AlphaKey), client(c, testserver.AlphaKey)
	const sid = "shared-1"
	sess, err := ca.TouchSession(ctx, sid, sandbox.SessionOptions{TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Files in through B, read by an execution submitted to C.
	if err := cb.Upload(ctx, sid, "in/data.txt", strings.NewReader("from B\n")); err != nil {
		t.Fatalf("upload through B: %v", err)
	}
	res, err := cc.Execute(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash",
		Code: "cat in/data.txt; echo from C >> in/data.txt; echo made > out.txt; hostname"})
	if err != nil {
		t.Fatalf("execute through C: %v", err)
	}
	if res.Stdout != "from B\nsandbox\n" {
		t.Errorf("execution through C saw %q", res.Stdout)
	}
	// What it wrote, seen through B, A and C.
	for _, s := range []*sandbox.Client{cb, ca, cc} {
		var buf bytes.Buffer
		if err := s.Download(ctx, sid, "in/data.txt", &buf); err != nil || buf.String() != "from B\nfrom C\n" {
			t.Errorf("download: %q, %v", buf.String(), err)
		}
		files, err := s.ListFiles(ctx, sid, "")
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		var names []string
		for _, f := range files {
			names = append(names, f.Name)
		}
		slices.Sort(names)
		if strings.Join(names, ",") != "in,out.txt" {
			t.Errorf("list: %v", names)
		}
	}
	// Executions through every node share the one workspace, in order.
	for i, s := range []*sandbox.Client{ca, cb, cc, cb} {
		res, err := s.Execute(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash", Code: "n=$(cat n 2>/dev/null || echo 0); echo $((n + 1)) > n; cat n"})
		if err != nil || strings.TrimSpace(res.Stdout) != string(rune('1'+i)) {
			t.Fatalf("execution %d: %q, %v", i+1, res.Stdout, err)
		}
	}
	if err := cc.RemoveFile(ctx, sid, "out.txt"); err != nil {
		t.Errorf("remove through C: %v", err)
	}
	got, err := cb.GetSession(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != sid || !got.CreatedAt.Equal(sess.CreatedAt) || got.Executions != 5 {
		t.Errorf("session through B: %+v, want the one made on A with 5 executions", got)
	}
	// Another tenant reaches nothing, through any node.
	for _, s := range nodes {
		other := client(s, testserver.BetaKey)
		if _, err := other.GetSession(ctx, sid); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("beta's GET of alpha's session via %s: %v, want not found", s.URL, err)
		}
		if err := other.Download(ctx, sid, "in/data.txt", &bytes.Buffer{}); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("beta's download of alpha's file via %s: %v, want not found", s.URL, err)
		}
	}

	// A dies. Its session's calls answer at once.
	a.Kill()
	killed := time.Now()
	for _, s := range []*testserver.Server{b, c} {
		for _, p := range []string{"/v1/sessions/" + sid, "/v1/sessions/" + sid + "/files/in/data.txt"} {
			start := time.Now()
			code, errCode, msg := call(t, s, "GET", p)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("GET %s took %v after the owner died", p, took)
			}
			if code != http.StatusServiceUnavailable || errCode != "session_unavailable" || !strings.Contains(msg, sid) {
				t.Errorf("GET %s right after the owner died: %d %s %q", p, code, errCode, msg)
			}
		}
	}
	// So does an execution for it, submitted through the SDK (which
	// retries the 503 as long as its MaxRetries let it).
	start := time.Now()
	_, err = cb.Execute(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash", Code: "true"})
	var ae *sandbox.APIError
	if !errors.As(err, &ae) || ae.Code != "session_unavailable" || !strings.Contains(ae.Message, sid) {
		t.Errorf("execution for the dead node's session: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the execution was refused after %v", took)
	}
	// Once A is lost (5 s), the session is: 410 through every node.
	for {
		code, errCode, msg := call(t, c, "GET", "/v1/sessions/"+sid)
		if code == http.StatusGone {
			if errCode != "session_lost" || !strings.Contains(msg, sid) {
				t.Errorf("lost session: %s %q", errCode, msg)
			}
			t.Logf("session lost %v after its node died", time.Since(killed).Round(100*time.Millisecond))
			break
		}
		if code != http.StatusServiceUnavailable || time.Since(killed) > 20*time.Second {
			t.Fatalf("%v after the kill: %d %s %q", time.Since(killed), code, errCode, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := cb.Execute(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash", Code: "true"}); !errors.Is(err, sandbox.ErrSessionLost) {
		t.Errorf("execution for a lost session: %v, want ErrSessionLost", err)
	}
	// Deleting it frees the id: a new, empty session on B.
	if err := cb.DeleteSession(ctx, sid); err != nil {
		t.Fatalf("delete a lost session: %v", err)
	}
	if _, err := cb.TouchSession(ctx, sid, sandbox.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = cc.Execute(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash", Code: "ls"})
	if err != nil || res.Stdout != "" {
		t.Errorf("the new session through C: %q, %v; want an empty workspace", res.Stdout, err)
	}

	// A comes back: it reaps what its killed process left, drops its copy
	// of the session (now B's), and forwards the session's calls to B.
	a.Launch()
	if _, err := os.Stat(filepath.Join(a.Data, "sessions", "alpha", sid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("node A kept its stale copy of the session: %v", err)
	}
	got, err = ca.GetSession(ctx, sid)
	if err != nil || got.Executions != 1 {
		t.Errorf("the session through the returned A: %+v, %v; want B's, with 1 execution", got, err)
	}
}

// TestQueuedForLostNode: an execution queued for a session whose node is
// gone before it ran ends failed, naming the session, once the node is
// lost; nothing stays queued.
func TestQueuedForLostNode(t *testing.T) {
	// One slot on A: the session's second execution waits in the queue.
	nodes := startNodes(t, []string{"--max-concurrency", "1"}, nil)
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	ca, cb := client(a, testserver.AlphaKey), client(b, testserver.AlphaKey)
	const sid = "busy"
	// A long execution holds the session on A, so the next one queues.
	first, err := ca.Submit(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash", Code: "sleep 300", Limits: sandbox.Limits{TimeoutMS: 400_000}})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, cb, first, sandbox.StatusRunning)
	second, err := cb.Submit(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash", Code: "echo never"})
	if err != nil {
		t.Fatal(err)
	}
	a.Kill()
	killed := time.Now()
	r1 := waitFinal(t, cb, first)
	if r1.Error == nil || r1.Error.Type != sandbox.ErrInternal || !r1.Error.Retryable || !strings.Contains(r1.Error.Message, "node-a") {
		t.Errorf("the running execution of the lost node: %+v", r1.Error)
	}
	r2 := waitFinal(t, cb, second)
	if r2.Status != sandbox.StatusFailed || r2.Error == nil || !strings.Contains(r2.Error.Message, sid) || r2.Stdout != "" {
		t.Errorf("the queued execution of the lost session: %s %+v", r2.Status, r2.Error)
	}
	t.Logf("lost %v after the kill", time.Since(killed).Round(100*time.Millisecond))
	// A comes back and reaps what its killed process left.
	a.Launch()
}

func waitStatus(t *testing.T, c *sandbox.Client, id string, want sandbox.Status) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := c.GetExecution(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s, want %s", id, r.Status, want)
		}
	}
}

func waitFinal(t *testing.T, c *sandbox.Client, id string) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := c.Wait(ctx, id)
	var se *sandbox.Error
	if err != nil && !errors.As(err, &se) {
		t.Fatalf("wait %s: %v", id, err)
	}
	return r
}

// TestDrain: node A is sent SIGTERM while it runs executions and holds
// others it claimed but has not started (a session's, waiting for the
// session's lock). What runs finishes on A; what had not started goes back
// to the queue — for A, which holds the session — and runs once A is back;
// work that any node may run is taken by B. A exits 0 within its drain
// timeout, and not one execution is lost.
func TestDrain(t *testing.T) {
	nodes := startNodes(t, []string{"--drain-timeout", "60s"}, nil)
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	ca, cb := client(a, testserver.AlphaKey), client(b, testserver.AlphaKey)
	// The session's first execution runs (it says so, then sleeps); the
	// next two wait for its lock on A.
	const sid = "draining"
	if _, err := ca.TouchSession(ctx, sid, sandbox.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		id, err := ca.Submit(ctx, sandbox.ExecuteRequest{SessionID: sid, Language: "bash",
			Code: fmt.Sprintf("echo begun; sleep 3; echo %d >> turns; cat turns", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i == 0 {
			waitOutput(t, ca, id, "begun")
		}
	}
	// Work for anyone, some of it running on A.
	for range 4 {
		id, err := ca.Submit(ctx, sandbox.ExecuteRequest{Language: "bash", Code: "echo begun; sleep 3; echo done"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// The session's second and third are claimed by A: waiting for the lock.
	for _, id := range ids[1:3] {
		waitStatus(t, ca, id, sandbox.StatusRunning)
	}
	stopped := make(chan time.Duration)
	go func() {
		start := time.Now()
		a.Stop()
		stopped <- time.Since(start)
	}()
	took := <-stopped
	if code := a.ExitCode(); code != 0 {
		t.Errorf("node A exited %d after SIGTERM, want 0", code)
	}
	t.Logf("node A drained and stopped in %v", took.Round(100*time.Millisecond))
	// The session's waiting executions wait for A, and run when it is back.
	a.Launch()
	for _, id := range ids {
		r := waitFinal(t, cb, id)
		if r.Status != sandbox.StatusSuccess {
			t.Errorf("%s ended %s %+v: lost to the drain", id, r.Status, r.Error)
		}
	}
	// In order, each once: the session's turns.
	r := waitFinal(t, cb, ids[2])
	if r.Stdout != "begun\n0\n1\n2\n" {
		t.Errorf("the session's last execution printed %q, want its turns 0 1 2 once each", r.Stdout)
	}
	// The waiting ones went back to the queue, and were claimed again (a
	// claim A made as it began to drain may take one once more, and give
	// it back again).
	for _, id := range ids[1:3] {
		if got := statuses(t, cb, id); !strings.HasPrefix(got, "queued running queued running") || !strings.HasSuffix(got, "queued running") {
			t.Errorf("%s went through %q, want it handed back (queued running queued running)", id, got)
		}
	}
}

// statuses lists the status events of a finished execution.
func statuses(t *testing.T, c *sandbox.Client, id string) string {
	t.Helper()
	var out []string
	for ev, err := range c.Stream(t.Context(), id, sandbox.StreamOptions{}) {
		if err != nil {
			t.Fatalf("stream %s: %v", id, err)
		}
		if ev.Type == sandbox.EventStatus {
			out = append(out, string(ev.Status))
		}
	}
	return strings.Join(out, " ")
}

// waitOutput follows an execution's events until its output holds want.
func waitOutput(t *testing.T, c *sandbox.Client, id, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out strings.Builder
	for ev, err := range c.Stream(ctx, id, sandbox.StreamOptions{}) {
		if err != nil {
			t.Fatalf("stream %s: %v", id, err)
		}
		out.WriteString(ev.Text)
		if strings.Contains(out.String(), want) {
			return
		}
	}
	t.Fatalf("%s ended without printing %q (it printed %q)", id, want, out.String())
}
