package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// apiKey is the key of tenant "default" on every bench server.
const apiKey = "bench-key-0123456789"

// errNoPool is a server that refused its [pool] configuration: a build
// without the warm pool.
var errNoPool = errors.New("pool not available")

// warmPool is one [[pool.warm]] entry.
type warmPool struct {
	image, tier string
	minIdle     int
	maxIdle     int
	zygote      bool
	preload     []string
	// system: live sandboxes' class (pool.Warm.System).
	system bool
}

func (p warmPool) toml() string {
	pre, _ := json.Marshal(p.preload)
	if p.preload == nil {
		pre = []byte("[]")
	}
	return fmt.Sprintf("\n[[pool.warm]]\nimage = %q\ntier = %q\nmin_idle = %d\nmax_idle = %d\nzygote = %t\npreload = %s\nsystem = %t\n",
		p.image, p.tier, p.minIdle, p.maxIdle, p.zygote, pre, p.system)
}

// poolConfig is the [pool] section for pools; none turns off the embedded
// default pool (cold rows). max_uses and idle_timeout are left at the
// embedded defaults, which a user's server runs with: a sandbox replaced
// every 100 executions (what the harness set before 2026-12-07) cost
// ≈4 ms of CPU per warm execution, about a tenth of a bare spawn's.
func poolConfig(pools ...warmPool) string {
	if len(pools) == 0 {
		return "\n[pool]\nwarm = []\n"
	}
	s := "\n[pool]\n"
	for _, p := range pools {
		s += p.toml()
	}
	return s
}

// server is a corral serve process started by the harness, with its
// warm pools.
type server struct {
	name  string
	url   string
	data  string
	pools []warmPool
	// cgroup is the parent of this server's sandboxes, its own under
	// testenv.CgroupParent, so that its CPU and memory are told apart
	// from the other servers' of the same run.
	cgroup string
	// standing is the CPU the server and its sandboxes use per second
	// when idle (measureStanding).
	standing float64

	cmd    *exec.Cmd
	logs   *tailBuffer
	done   chan struct{}
	client *http.Client
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if n := len(t.b) - 64<<10; n > 0 {
		t.b = append(t.b[:0], t.b[n:]...)
	}
	return len(p), nil
}

// about is what the kept log says of id and its errors, one line per
// record, or "" when it says nothing: an internal error's cause is only in
// the server's log.
func (t *tailBuffer) about(id string) string {
	var out strings.Builder
	for line := range strings.SplitSeq(t.String(), "\n") {
		if (id != "" && strings.Contains(line, id)) || strings.Contains(line, `"level":"ERROR"`) {
			out.WriteString("\n\t" + line)
		}
	}
	return out.String()
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// startServer starts corral serve with the pools, on the embedded
// backends, and waits until it is ready. A server that refuses the [pool]
// section as unknown settings is errNoPool. The server stops at the end
// of b.
func startServer(b *testing.B, name string, pools ...warmPool) (*server, error) {
	b.Helper()
	return startServerWith(b, name, "", pools...)
}

// startServerWith is startServer with more of the configuration file
// (TOML sections after the pools').
func startServerWith(b *testing.B, name, extra string, pools ...warmPool) (*server, error) {
	b.Helper()
	return startServerFlags(b, name, extra, nil, pools...)
}

// startServerFlags is startServerWith with more flags of corral serve
// (a node of a cluster: --store, --state, --blob, --node-id).
func startServerFlags(b *testing.B, name, extra string, flags []string, pools ...warmPool) (*server, error) {
	b.Helper()
	data := testenv.DataDir(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	listen := l.Addr().String()
	l.Close()
	cfg := `
max_concurrency = 32
queue_bound = 512

[log]
level = "info"
format = "json"
` + poolConfig(pools...) + extra
	cfgPath := filepath.Join(data, "corral.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	s := &server{
		name: name, url: "http://" + listen, data: data, pools: pools, logs: &tailBuffer{}, done: make(chan struct{}),
		cgroup: testenv.CgroupParent + "/" + cgroupName(name),
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128}},
	}
	s.cmd = exec.Command(testenv.Corral(b), "serve", "--config", cfgPath, "--listen", listen, "--data-dir", data,
		"--api-key", apiKey, "--cache-dir", testenv.CacheDir(), "--cgroup-parent", s.cgroup,
		"--image-dir", testenv.ImageDir())
	s.cmd.Args = append(s.cmd.Args, flags...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s server: %w", name, err)
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	b.Cleanup(func() {
		if err := s.stop(); err != nil {
			b.Errorf("%s server: %v", name, err)
		}
		// The server has removed its sandboxes' cgroups; their parent is
		// this run's to remove.
		if err := cgroup.Remove(s.cgroup); err != nil {
			b.Errorf("%s server: %v", name, err)
		}
	})
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(s.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			log := s.logs.String()
			if len(pools) > 0 && strings.Contains(log, "unknown settings") && strings.Contains(log, "pool") {
				return nil, errNoPool
			}
			return nil, fmt.Errorf("%s server exited:\n%s", name, log)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s server not ready:\n%s", name, s.logs.String())
		}
	}
}

// cgroupName is name as a cgroup's name: letters and digits, the rest
// dashes.
func cgroupName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
}

// stop ends the server with SIGTERM, as an operator would.
func (s *server) stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		return errors.New("ignored SIGTERM")
	}
}

// execute runs req synchronously and checks it printed want on the tier
// it asked for.
func (s *server) execute(ctx context.Context, req sandbox.ExecuteRequest, want string) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	status, raw, err := s.call(ctx, http.MethodPost, "/v1/executions?wait=true", body)
	if err != nil {
		return err
	}
	var res sandbox.Result
	switch status {
	case http.StatusOK:
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("decode result: %w", err)
		}
	case http.StatusAccepted:
		// The server's wait ran out first (a loaded server): the
		// execution goes on; the client keeps waiting, by polling.
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("decode submission: %w", err)
		}
		if res, err = s.await(ctx, res.ExecutionID); err != nil {
			return err
		}
	default:
		return fmt.Errorf("POST /v1/executions: %d: %.300s", status, raw)
	}
	if res.Status != sandbox.StatusSuccess || res.Stdout != want || res.Tier != string(req.Isolation) {
		return fmt.Errorf("execution %s: status %s, tier %s, error %+v, stdout %q, stderr %.300q%s",
			res.ExecutionID, res.Status, res.Tier, res.Error, res.Stdout, res.Stderr, s.logs.about(res.ExecutionID))
	}
	return nil
}

// await polls execution id until it is final.
func (s *server) await(ctx context.Context, id string) (sandbox.Result, error) {
	for {
		status, raw, err := s.call(ctx, http.MethodGet, "/v1/executions/"+id, nil)
		if err != nil {
			return sandbox.Result{}, err
		}
		if status != http.StatusOK {
			return sandbox.Result{}, fmt.Errorf("GET /v1/executions/%s: %d: %.300s", id, status, raw)
		}
		var res sandbox.Result
		if err := json.Unmarshal(raw, &res); err != nil {
			return sandbox.Result{}, fmt.Errorf("decode result: %w", err)
		}
		if res.Status.Final() {
			return res, nil
		}
		select {
		case <-ctx.Done():
			return sandbox.Result{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// call sends an authenticated API request (body, if any, is JSON) and
// returns the answer's status and body.
func (s *server) call(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, s.url+path, r)
	if err != nil {
		return 0, nil, err
	}
	hr.Header.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(hr)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// samples fetches the server's /metrics and returns metric name's samples.
func (s *server) samples(ctx context.Context, name string) ([]sample, error) {
	status, raw, err := s.call(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", status)
	}
	return parseMetrics(bytes.NewReader(raw), name)
}

// metric returns the sum of metric name's samples whose labels include
// want, from the server's /metrics.
func (s *server) metric(ctx context.Context, name string, want map[string]string) (float64, error) {
	samples, err := s.samples(ctx, name)
	if err != nil {
		return 0, err
	}
	return sum(samples, want), nil
}

// idle returns the ready sandboxes of each of the server's pools, by
// "image/tier".
func (s *server) idle(ctx context.Context) (map[string]int, error) {
	samples, err := s.samples(ctx, "corral_pool_idle")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range s.pools {
		out[p.image+"/"+p.tier] = int(sum(samples, map[string]string{"tier": p.tier, "image": p.image}))
	}
	return out, nil
}

// waitIdle waits until each pool of the server holds at least its
// minimum of ready sandboxes (or n, when n > 0), no used sandbox is still
// being reset and, with settle, until the counts stop changing for a
// quarter of a second: one measurement must not pay for the refill or the
// reset after another.
func (s *server) waitIdle(ctx context.Context, n int, settle bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last map[string]int
	for {
		cur, err := s.idle(ctx)
		if err != nil {
			return fmt.Errorf("%s server: %w", s.name, err)
		}
		resetting, err := s.metric(ctx, "corral_pool_resetting", nil)
		if err != nil {
			return fmt.Errorf("%s server: %w", s.name, err)
		}
		ready := resetting == 0
		for _, p := range s.pools {
			want := p.minIdle
			if n > 0 {
				want = n
			}
			if cur[p.image+"/"+p.tier] < want {
				ready = false
			}
		}
		if ready && (!settle || maps.Equal(cur, last)) {
			return nil
		}
		last = cur
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s server: ready sandboxes %v, want at least %d (or each pool's minimum) and steady: %w", s.name, cur, n, ctx.Err())
		case <-time.After(poll(settle)):
		}
	}
}

// poll is how often waitIdle looks: a quarter second when the counts
// must settle, else often, since at concurrency 1 it runs before every
// execution.
func poll(settle bool) time.Duration {
	if settle {
		return 250 * time.Millisecond
	}
	return 10 * time.Millisecond
}

// waitTornDown waits until none of the server's sandboxes is left in its
// data directory (a sandbox's directory goes last in its teardown).
func (s *server) waitTornDown(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		left, err := oci.SandboxDirs(s.data)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s server: sandboxes still there: %v: %w", s.name, left, ctx.Err())
		case <-time.After(poll(false)):
		}
	}
}

// rss is the server process's resident memory in bytes.
func (s *server) rss() (int64, error) {
	return procStatusKB(s.cmd.Process.Pid, "VmRSS:")
}

func procStatusKB(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return fieldKB(b, key)
}

// memAvailable is MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return fieldKB(b, "MemAvailable:")
}

func fieldKB(b []byte, key string) (int64, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s: %w", key, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s", key)
}

// cpu is the CPU time the server and its sandboxes have used: the server
// process with the children it reaped (the runc and runsc it waited for),
// from /proc, and everything that ran in its sandboxes' cgroups since its
// parent cgroup was made (cpuacct.usage on cgroup v1, cpu.stat's
// usage_usec on v2, which keep the time of the sandboxes removed since).
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis, from the state
	// (field 3): utime, stime, cutime and cstime are fields 14 to 17.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", s.cmd.Process.Pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", s.cmd.Process.Pid, err)
		}
		ticks += n
	}
	sb, err := cgroup.CPUNanos("/" + s.cgroup)
	if err != nil {
		return 0, fmt.Errorf("%s server's sandboxes: %w", s.name, err)
	}
	return time.Duration(ticks)*time.Second/clockTicks + time.Duration(sb), nil
}

// measureStanding measures the server's standing CPU (s.standing): what
// it and its sandboxes use per second over window once its pool is full
// and settled (or, without a pool, its sandboxes torn down), with no
// request.
func (s *server) measureStanding(ctx context.Context, window time.Duration) error {
	var err error
	if len(s.pools) > 0 {
		err = s.waitIdle(ctx, 0, true, 2*time.Minute)
	} else {
		err = s.waitTornDown(ctx, 2*time.Minute)
	}
	if err != nil {
		return err
	}
	cpu0, err := s.cpu()
	if err != nil {
		return err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(window):
	}
	cpu1, err := s.cpu()
	if err != nil {
		return err
	}
	s.standing = float64(cpu1-cpu0) / float64(time.Since(t0))
	return nil
}

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100
