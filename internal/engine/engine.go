// Package engine runs one execution end to end: validate the request, pick
// the tier and image, create a sandbox, place the code, compile and run it
// under its limits, collect output and kernel facts, and decide the verdict.
package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/collect"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/router"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// Config holds the engine's limits policy.
type Config struct {
	// Default fills limits a request leaves at zero; Max bounds them.
	Default, Max sandbox.Limits
	// Pids caps processes and threads per sandbox.
	Pids int64
	// CompileTimeout bounds a compile step, which limits.timeout_ms does
	// not cover; a program allowed longer gets as long for its compile
	// (CompileDeadline).
	CompileTimeout time.Duration
	// OutputKeep is how much of each end of stdout and stderr is kept.
	OutputKeep int
	// MaxCodeBytes caps the code in a request.
	MaxCodeBytes int
	// DestroyAsync tears sandboxes down after the result is returned
	// (a server); otherwise before (a one-shot CLI).
	DestroyAsync bool
	// Files bounds inputs and artifacts.
	Files FilesConfig
	// Network is the server's egress policy; requests can only narrow it.
	Network netpolicy.Policy
	// CacheDir keeps languages' warmed build caches; empty disables them.
	CacheDir string
	// UID and GID are the sandbox user, who owns what warming writes.
	UID, GID int
	// Routing is the policy for isolation "auto"; the zero value is the
	// default.
	Routing router.Config
	// SummaryChars caps a record's summary in characters (0:
	// collect.DefaultSummaryChars).
	SummaryChars int
}

// DefaultConfig returns the conservative defaults of docs/limits.md.
func DefaultConfig() Config {
	return Config{
		Default:        sandbox.Limits{TimeoutMS: 30_000, MemoryMB: 512, CPUCores: 1, DiskMB: 1024},
		Max:            sandbox.Limits{TimeoutMS: 15 * 60_000, MemoryMB: 8192, CPUCores: 4, DiskMB: 10240},
		Pids:           256,
		CompileTimeout: 60 * time.Second,
		OutputKeep:     collect.DefaultKeep,
		MaxCodeBytes:   1 << 20,
		Files:          DefaultFilesConfig(),
	}
}

// ImageResolver finds an image by name.
type ImageResolver interface {
	Resolve(name string) (images.Image, error)
}

// Sink receives a running program's output as it is produced. Calls come
// from one goroutine and must not block for long.
type Sink interface {
	Stdout(p []byte)
	Stderr(p []byte)
}

// SandboxObserver is a Sink that wants to know which sandbox runs the
// execution, once it exists (a server records it with the live state).
type SandboxObserver interface {
	Sandbox(id string)
}

// StartObserver is a Sink that decides whether the execution's first
// process (its compile step, or its program) may start: before that,
// nothing of the request has run, and a server that is stopping hands the
// execution back to the queue instead. Starting returning false ends Run
// with ErrNotStarted's verdict (cancelled) and nothing run.
type StartObserver interface {
	Starting() bool
}

// ErrNotStarted: a StartObserver refused the execution's first process.
var ErrNotStarted = errors.New("not started: the node is stopping")

// Engine runs executions. It is safe for concurrent use.
type Engine struct {
	cfg      Config
	fleet    *fleet.Fleet
	images   ImageResolver
	log      *slog.Logger
	caches   *caches
	scratch  string // the engine's own files (downloaded inputs)
	emptyDir string // an empty directory, the lower layer of a cold cache

	// teardown counts leases being released in the background.
	teardown sync.WaitGroup

	// bg bounds background work (cache warming) that outlives a request
	// but not the engine; Close cancels it and waits.
	bg     context.Context
	stopBG context.CancelFunc
	bgWG   sync.WaitGroup
}

// New returns an engine that runs executions on fl's sandboxes. scratch is
// a directory the engine may use for its own files.
func New(cfg Config, fl *fleet.Fleet, imgs ImageResolver, scratch string, log *slog.Logger) (*Engine, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, fleet: fl, images: imgs, log: log, scratch: scratch, emptyDir: filepath.Join(scratch, "empty")}
	e.bg, e.stopBG = context.WithCancel(context.Background())
	if err := os.MkdirAll(e.emptyDir, 0o755); err != nil {
		return nil, fmt.Errorf("create engine dir: %w", err)
	}
	if cfg.CacheDir != "" {
		e.caches = &caches{dir: cfg.CacheDir, inflight: map[string]*warming{}, failed: map[string]time.Time{}}
	}
	return e, nil
}

// Close stops background work and waits for it and for sandboxes being
// torn down.
func (e *Engine) Close() {
	e.stopBG()
	e.bgWG.Wait()
	e.teardown.Wait()
}

// Fleet returns the fleet the engine's executions run on.
func (e *Engine) Fleet() *fleet.Fleet { return e.fleet }

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// NewID returns a fresh execution id: "ex_", a millisecond timestamp (ids
// sort by creation) and random bits.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("ex_%011x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// Job is a validated request, ready to run.
type Job struct {
	Req sandbox.ExecuteRequest
	// Placement is where its sandbox runs and on what; the caller sets
	// its Tenant after Prepare.
	Placement

	// What the caller adds after Prepare:

	// Lease lends the sandbox the execution runs in (Acquire); nil: a
	// fresh one from the fleet, destroyed after.
	Lease *fleet.Lease
	// unlockImage ends the lock Acquire took on the image.
	unlockImage func()
	// Artifacts, if set, receives the files under /workspace/output, each
	// under ArtifactPrefix + its path.
	Artifacts      ArtifactStore
	ArtifactPrefix string
	// Audit, if set, receives every egress attempt of the execution.
	Audit func([]netpolicy.Attempt)
}

// Prepare validates req, fills defaults and routes it: its sandbox is
// asked for as a SandboxRequest made from it, once. A *validate.InputError
// says what to fix; a *TierPendingError (ErrTierPending) that the valid
// request needs a tier still being installed, an *ImagePendingError
// (ErrImagePending) an image still being built.
func (e *Engine) Prepare(req sandbox.ExecuteRequest) (*Job, error) {
	tierField, err := e.checkExecution(&req)
	if err != nil {
		return nil, err
	}
	p, err := e.PrepareSandbox(SandboxRequest{
		Language:  req.Language,
		Image:     req.Image,
		Tier:      req.Tier,
		Limits:    Limits{MemoryMB: req.Limits.MemoryMB, CPUCores: req.Limits.CPUCores, DiskMB: req.Limits.DiskMB},
		Env:       req.Env,
		Network:   req.Network,
		Code:      req.Code,
		TimeoutMS: req.Limits.TimeoutMS,
		Untrusted: req.Untrusted,
		Names:     Names{Tier: tierField},
	})
	if err != nil {
		return nil, err
	}
	req.Language = p.Runner.Name()
	req.Limits.MemoryMB, req.Limits.CPUCores = p.Limits.MemoryMB, p.Limits.CPUCores
	if req.Tier == "" {
		req.Tier = sandbox.TierAuto
	}
	if req.ExecutionID == "" {
		req.ExecutionID = NewID()
	}
	return &Job{Req: req, Placement: *p}, nil
}

// Run executes job and returns its record: in job.Lease's sandbox, or in a
// fresh one from the fleet. Failures of the program and of Corral alike
// are verdicts in the record; Run has no error of its own. Cancelling ctx
// cancels the execution. The lease is released when Run is done with it:
// handed on (clean) only if the sandbox is intact.
func (e *Engine) Run(ctx context.Context, job *Job, sink Sink) sandbox.Result {
	var err error
	if job.Lease == nil {
		err = e.Acquire(ctx, job, fleet.FreshAcquirer{Fleet: e.fleet})
	}
	if job.unlockImage != nil {
		defer job.unlockImage()
	}
	lease := job.Lease
	res := newRecord(job) // after the image's hold: the image may have been re-resolved
	if lease != nil && lease.Tier != "" {
		// It runs where the live sandbox runs, whatever the request
		// would have been routed to.
		res.Tier, res.TierReason = string(lease.Tier), "runs in the session's live sandbox"
		res.Image, res.ImageDigest = lease.Image.Name, lease.Image.Digest
	}
	out := newCapture(e.cfg.OutputKeep, sink)
	var facts collect.Facts
	if err == nil {
		facts, err = e.execute(ctx, job, lease, out, &res)
		// After the record is complete: the teardown is not the program's
		// time. A sandbox that was killed (timeout, cancel), failed, or
		// whose program hit a limit is not handed on.
		defer func() {
			intact := res.Error == nil || res.Error.Type == sandbox.ErrRuntime || res.Error.Type == sandbox.ErrCompile
			e.release(lease, err == nil && intact && !facts.TimedOut && !facts.Cancelled && !facts.AgentKilled)
		}()
	}
	e.verdict(ctx, job, &res, out, facts, err)
	return res
}

// Failed is the record of job when it could not get a sandbox (err, from
// the caller's acquisition): cancelled if ctx ended, Corral's retryable
// failure otherwise.
func (e *Engine) Failed(ctx context.Context, job *Job, err error) sandbox.Result {
	res := newRecord(job)
	e.verdict(ctx, job, &res, newCapture(e.cfg.OutputKeep, nil), collect.Facts{}, err)
	return res
}

// newRecord is job's record as its execution begins.
func newRecord(job *Job) sandbox.Result {
	req := job.Req
	return sandbox.Result{
		ExecutionID: req.ExecutionID,
		SessionID:   req.SessionID,
		Language:    req.Language,
		Status:      sandbox.StatusRunning,
		Tier:        string(job.Tier),
		TierReason:  job.TierReason,
		Image:       job.Image.Name,
		ImageDigest: job.Image.Digest,
		Limits:      req.Limits,
		StartedAt:   time.Now().UTC(),
	}
}

// release gives lease back: a sandbox that is not handed on is torn down,
// and a server does that after the record (a cancel or a timeout is
// answered without waiting for the runtime's delete and the disk).
func (e *Engine) release(lease *fleet.Lease, clean bool) {
	if clean || !e.cfg.DestroyAsync {
		lease.Release(clean)
		return
	}
	e.teardown.Add(1)
	go func() {
		defer e.teardown.Done()
		lease.Release(false)
	}()
}

// verdict completes res from what the execution produced and the facts
// the kernel and the agent reported, or from err, the reason it did not
// run to its end.
func (e *Engine) verdict(ctx context.Context, job *Job, res *sandbox.Result, out *capture, facts collect.Facts, err error) {
	res.Stdout, res.StdoutBytes, res.StdoutLines, res.StdoutTruncated = out.stdout.Text(), out.stdout.Bytes(), out.stdout.Lines(), out.stdout.Truncated()
	res.Stderr, res.StderrBytes, res.StderrLines, res.StderrTruncated = out.stderr.Text(), out.stderr.Bytes(), out.stderr.Lines(), out.stderr.Truncated()
	res.FinishedAt = time.Now().UTC()
	var bad *inputProblem
	var refused *validate.InputError
	switch {
	case errors.As(err, &bad):
		res.Status = sandbox.StatusFailed
		res.Error = &sandbox.Failure{Type: sandbox.ErrInput, Message: bad.Error()}
	case errors.As(err, &refused):
		// The sandbox's holder refused the request (a paused sandbox).
		res.Status = sandbox.StatusFailed
		res.Error = &sandbox.Failure{Type: sandbox.ErrInput, Message: refused.Error()}
	case err != nil && (ctx.Err() != nil || errors.Is(err, ErrNotStarted)):
		res.Status, res.Error = collect.Verdict(collect.Facts{Cancelled: true})
	case err != nil:
		res.Status = sandbox.StatusFailed
		res.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: internalMessage(err), Retryable: true}
		e.log.Error("execution failed", "execution_id", job.Req.ExecutionID, "err", err)
	default:
		facts.Stderr = res.Stderr
		facts.Explain = e.explain(job)
		res.Status, res.Error = collect.Verdict(facts)
		res.LimitsHit = collect.LimitsHit(facts)
		if facts.Exited && !facts.TimedOut && !facts.Cancelled {
			code := facts.ExitCode
			res.ExitCode = &code
			res.Signal = facts.Signal
		}
	}
	res.Summary = collect.Summary(*res, e.cfg.SummaryChars)
}

// internalMessage is what a record says of Corral's own failure: Corral's
// words, never the text of the sandbox's agent or of the runtime (which Run
// logs under the execution's id).
func internalMessage(err error) string {
	var re *agent.RemoteError
	switch {
	case errors.Is(err, images.ErrNotFound):
		return "internal error: " + err.Error() // the image store's own words
	case errors.As(err, &re):
		return "internal error: the sandbox's agent failed a request; retry"
	case errors.Is(err, agent.ErrLost):
		return "internal error: the sandbox ended unexpectedly; retry"
	}
	return "internal error: Corral could not run the execution; retry"
}

// CompileDeadline bounds the compile step of a program with limits l: the
// configured CompileTimeout, or the program's own timeout when that is
// longer (a program given ten minutes may take more than one to build).
func (e *Engine) CompileDeadline(l sandbox.Limits) time.Duration {
	return max(e.cfg.CompileTimeout, time.Duration(l.TimeoutMS)*time.Millisecond)
}

// execute does the sandbox work of Run in lease's sandbox, treating the
// sandbox as its fate says (uses); an error is Corral's fault (or a
// cancellation), never the program's.
func (e *Engine) execute(ctx context.Context, job *Job, lease *fleet.Lease, out *capture, res *sandbox.Result) (collect.Facts, error) {
	req, l := job.Req, job.Req.Limits
	sb, use := lease.Sandbox, uses[lease.Fate]
	facts := collect.Facts{TimeoutMS: l.TimeoutMS, MemoryMB: l.MemoryMB, DiskMB: l.DiskMB, Pids: e.cfg.Pids}
	// Held by this execution until its lease is released; past twice its
	// limits, the sweeper takes it as stuck.
	e.fleet.Hold(sb, fleet.HolderExecution, time.Now().Add(2*time.Duration(l.TimeoutMS)*time.Millisecond+e.CompileDeadline(l)+time.Minute))
	inputs, err := e.fetchInputs(ctx, req.Files)
	defer inputs.remove()
	if err != nil {
		return facts, err
	}
	// A kept sandbox (a session's) carries its kernel counters from earlier
	// executions; this execution's facts are what changed from here.
	base, err := sb.Stats(ctx)
	if err != nil {
		return facts, fmt.Errorf("read sandbox stats: %w", err)
	}
	if o, ok := out.sink.(SandboxObserver); ok {
		o.Sandbox(sb.ID())
	}
	env, stop, err := e.enter(ctx, job, lease, use)
	defer stop()
	if err != nil {
		return facts, err
	}
	if err := inputs.place(ctx, sb.Agent()); err != nil {
		return facts, err
	}
	plan := job.Runner.Plan(req.Code)
	placed, err := sendFiles(ctx, sb.Agent(), plan.Files)
	if err != nil {
		return facts, err
	}
	if plan.Compile != nil {
		limit := e.CompileDeadline(l)
		st, err := e.step(ctx, sb, stepRun{Step: *plan.Compile, placed: placed, base: base, shared: use.shared}, env, nil, limit, out)
		placed = nil
		if err != nil {
			return facts, err
		}
		if st.timedOut || !st.exited || st.code != 0 {
			return e.finishFacts(ctx, sb, base, st.compileFacts(facts, limit), res)
		}
	}
	if err := sb.ResetStats(ctx); err != nil {
		e.log.Warn("reset sandbox stats", "sandbox", sb.ID(), "err", err)
	}
	run := stepRun{Step: plan.Run, placed: placed, base: base, shared: use.shared, via: forkVia(job, lease, plan.Run, env)}
	st, err := e.step(ctx, sb, run, env, req.Env, time.Duration(l.TimeoutMS)*time.Millisecond, out)
	if err != nil {
		return facts, err
	}
	res.StartedAt, res.DurationMS = st.started.UTC(), st.duration.Milliseconds()
	if facts, err = e.finishFacts(ctx, sb, base, st.runFacts(facts, out), res); err != nil {
		return facts, err
	}
	res.Artifacts, res.ArtifactsSkipped = e.collectArtifacts(ctx, sb, job, use.onlyNew, st.started)
	return facts, nil
}

// enter readies lease's sandbox for job as use says: /tmp emptied, the
// execution's egress proxy started. It returns the environment the job's
// programs start from, and stop, which ends the proxy (to be called even
// after an error).
func (e *Engine) enter(ctx context.Context, job *Job, lease *fleet.Lease, use use) (env map[string]string, stop func(), err error) {
	sb := lease.Sandbox
	stop = func() {}
	if use.clearTmp {
		if err := sb.Agent().Reset(ctx, agent.ResetRequest{Clear: []string{"/tmp"}}); err != nil {
			return nil, stop, fmt.Errorf("empty /tmp: %w", err)
		}
	}
	env = e.baseEnv(job.Image)
	if use.egress {
		g, err := e.startEgress(ctx, job, sb)
		if err != nil {
			return nil, stop, err
		}
		if g != nil {
			stop = func() { g.stop(job) }
			maps.Copy(env, proxyEnv)
		}
	}
	maps.Copy(env, lease.Env)
	return env, stop, nil
}

// sendFiles sends a program's files to the agent. Their answers are
// checked once the first step has started (see SendFile): one round trip
// fewer; each returned func waits for one.
func sendFiles(ctx context.Context, c *agent.Client, files []lang.File) ([]func(context.Context) error, error) {
	var placed []func(context.Context) error
	for _, f := range files {
		wait, err := c.SendFile(ctx, f.Path, f.Mode, bytes.NewReader(f.Content))
		if err != nil {
			return nil, fmt.Errorf("place %s: %w", f.Path, err)
		}
		path := f.Path
		placed = append(placed, func(ctx context.Context) error {
			if err := wait(ctx); err != nil {
				return fmt.Errorf("place %s: %w", path, err)
			}
			return nil
		})
	}
	return placed, nil
}

// forkVia is the zygote of lease's sandbox that may fork job's step (run
// in env), or 0: none runs there, or it cannot give the step what it
// needs.
func forkVia(job *Job, lease *fleet.Lease, step lang.Step, env map[string]string) uint32 {
	z := lease.Zygote
	if z == nil || z.Language != job.Runner.Name() {
		return 0
	}
	if zr, ok := job.Runner.(lang.Zygoter); ok && zr.Forkable(step, z.Env, stepEnv(env, step.Env, job.Req.Env)) {
		return z.ID
	}
	return 0
}

// finishFacts adds the sandbox's kernel facts since base, read when the
// execution got the sandbox.
func (e *Engine) finishFacts(ctx context.Context, sb runtime.Sandbox, base runtime.Stats, facts collect.Facts, res *sandbox.Result) (collect.Facts, error) {
	stats, err := sb.Stats(ctx)
	if err != nil {
		return facts, fmt.Errorf("read sandbox stats: %w", err)
	}
	stats = since(stats, base)
	facts.OOMKills = stats.OOMKills
	if !stats.MemoryAtLimit {
		// Killed while the sandbox was below its memory limit: the host
		// ran out (or a cgroup above the sandbox's), not the program.
		facts.OOMKills, facts.HostOOMKills = 0, stats.OOMKills
	}
	facts.PidsLimitHits = stats.PidsLimitHits
	facts.DiskFull, facts.DiskFullAtStart = stats.DiskFull, stats.DiskFull && base.DiskFull
	facts.PeakMemoryMB = stats.PeakMemoryBytes >> 20
	res.PeakMemoryMB = facts.PeakMemoryMB
	return facts, nil
}

// since returns the counters of now that grew after base. A counter that
// went down (a sandbox whose cgroup was recreated) counts from zero.
func since(now, base runtime.Stats) runtime.Stats {
	if now.OOMKills >= base.OOMKills {
		now.OOMKills -= base.OOMKills
	}
	if now.PidsLimitHits >= base.PidsLimitHits {
		now.PidsLimitHits -= base.PidsLimitHits
	}
	return now
}

// baseEnv is the reproducible environment every program starts from.
func (e *Engine) baseEnv(img images.Image) map[string]string {
	env := map[string]string{
		"PATH":    "/usr/local/bin:/usr/bin:/bin",
		"HOME":    "/workspace",
		"TMPDIR":  "/tmp",
		"TZ":      "UTC",
		"LANG":    "C.UTF-8",
		"USER":    "sandbox",
		"LOGNAME": "sandbox",
		// Hash randomisation off: the same code prints the same dict order.
		"PYTHONHASHSEED": "0",
	}
	for _, kv := range img.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// Env is the environment every program on img starts from: the base of
// every execution's (a live sandbox's processes start from it too).
func (e *Engine) Env(img images.Image) map[string]string { return e.baseEnv(img) }

// stepEnv merges base, step and request variables (in that order of
// precedence, lowest first) and sorts them.
func stepEnv(base map[string]string, step []string, request map[string]string) []string {
	env := maps.Clone(base)
	for _, kv := range step {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	maps.Copy(env, request)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

type stepResult struct {
	// atLimit: the sandbox was seen holding pidsSeen processes, as many
	// as its pidsLimit allows.
	atLimit             bool
	pidsSeen, pidsLimit int64
	exited              bool
	code                int
	signal              string
	timedOut            bool
	// agentKilled: the program killed the sandbox's agent (see
	// runtime.AgentWitness).
	agentKilled bool
	started     time.Time
	duration    time.Duration
}

// stepRun is a step and, if via is set, the zygote that forks it.
type stepRun struct {
	lang.Step
	via uint32
	// placed are the answers for files sent ahead of this step: checked
	// once it has started; a file that failed ends the step with an error.
	placed []func(context.Context) error
	// base are the sandbox's counters before the execution.
	base runtime.Stats
	// shared: other processes run beside the step (use.shared). It runs
	// persistent, so its end reaps none of them, and at its deadline only
	// its own process group is killed.
	shared bool
}

// facts adds what r says of the step's end to f.
func (r stepResult) facts(f collect.Facts) collect.Facts {
	f.TimedOut, f.AgentKilled = r.timedOut, r.agentKilled
	f.Exited, f.ExitCode, f.Signal = r.exited, r.code, r.signal
	return f
}

// compileFacts are f after a compile step that failed (r), with its own
// time limit.
func (r stepResult) compileFacts(f collect.Facts, limit time.Duration) collect.Facts {
	f = r.facts(f)
	f.CompileFailed = true
	if r.timedOut {
		f.TimeoutMS = limit.Milliseconds()
	}
	return f
}

// runFacts are f after the program's step (r), whose status it wrote to
// out (a compile error an interpreter met).
func (r stepResult) runFacts(f collect.Facts, out *capture) collect.Facts {
	f = r.facts(f)
	if r.atLimit {
		f.PidsAtLimit, f.PidsSeen, f.Pids = true, r.pidsSeen, r.pidsLimit
	}
	f.CompileFailed = strings.TrimSpace(string(out.status)) == lang.StatusCompileError
	return f
}

// step runs one process to its end, killing everything in the sandbox at
// the deadline or on cancellation.
func (e *Engine) step(ctx context.Context, sb runtime.Sandbox, s stepRun, base map[string]string, reqEnv map[string]string, timeout time.Duration, out *capture) (stepResult, error) {
	dir := s.Dir
	if dir == "" {
		dir = "/workspace"
	}
	if o, ok := out.sink.(StartObserver); ok && !out.started {
		if !o.Starting() {
			return stepResult{}, ErrNotStarted
		}
		out.started = true
	}
	start := time.Now()
	p, err := sb.Agent().Start(ctx, agent.StartRequest{
		Argv:       s.Argv,
		Env:        stepEnv(base, s.Env, reqEnv),
		Dir:        dir,
		StatusFD:   s.StatusFD,
		Via:        s.via,
		Persistent: s.shared,
	}, out)
	if err != nil {
		return stepResult{}, err
	}
	kill := func() { e.kill(sb) }
	if s.shared {
		kill = func() { e.killGroup(p) }
	}
	for _, wait := range s.placed {
		if err := wait(ctx); err != nil {
			kill()
			return stepResult{}, err
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	watch := e.watchLimit(sb, p.Done())
	var r stepResult
	select {
	case <-p.Done():
	case <-timer.C:
		r.timedOut = true
		// The periodic probes can all miss on a loaded host (each has
		// probeTimeout); a program that ran out its time gets one more,
		// patient look before the sandbox goes.
		watch.checkWithin(e, sb, lastProbeTimeout)
		kill()
	case <-ctx.Done():
		kill()
	}
	st, err := p.Wait(context.Background())
	r.started, r.duration = start, time.Since(start)
	r.atLimit, r.pidsSeen, r.pidsLimit = watch.full.Load(), watch.seen.Load(), watch.limit.Load()
	if err != nil {
		if r.timedOut {
			return r, nil // we killed the sandbox ourselves
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		// The sandbox died under the program: the kernel's facts (an OOM
		// kill of the agent, say) decide; otherwise it is ours.
		if stats, serr := sb.Stats(context.Background()); serr == nil {
			if stats = since(stats, s.base); stats.OOMKills > 0 || stats.PidsLimitHits > 0 || r.atLimit {
				r.exited, r.code, r.signal = true, 128+int(syscall.SIGKILL), "SIGKILL"
				return r, nil
			}
		}
		if w, ok := sb.(runtime.AgentWitness); ok && w.AgentKilledByProgram() {
			r.agentKilled = true
			return r, nil
		}
		return r, err
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.exited = true
	if st.Signal != 0 {
		r.code = 128 + st.Signal
		r.signal = unix.SignalName(syscall.Signal(st.Signal))
	} else {
		r.code = st.Code
	}
	return r, nil
}

// probeInterval is how often a running program's process count is checked;
// probeTimeout bounds one such check, lastProbeTimeout the one made at a
// program's deadline. gVisor answers from inside the sandbox, which a fork
// bomb keeps busy.
const (
	probeInterval    = 500 * time.Millisecond
	probeTimeout     = 2 * time.Second
	lastProbeTimeout = 5 * time.Second
)

// watchLimit polls, until done, whether the sandbox is full of processes;
// the flag stays set once seen. It matters where the kernel keeps no count
// of refused forks (gVisor), and where a fork bomb can take the sandbox
// down (by exhausting memory) before its deadline.
func (e *Engine) watchLimit(sb runtime.Sandbox, done <-chan struct{}) *limitWatch {
	w := &limitWatch{}
	if _, ok := sb.(runtime.LimitProber); !ok {
		return w
	}
	go func() {
		t := time.NewTicker(probeInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if w.checkWithin(e, sb, probeTimeout) {
					return
				}
			}
		}
	}()
	return w
}

// limitWatch remembers that a sandbox was seen full of processes.
type limitWatch struct {
	full        atomic.Bool
	seen, limit atomic.Int64 // set before full
}

// checkWithin probes once, for at most timeout, unless the sandbox was
// already seen full.
func (w *limitWatch) checkWithin(e *Engine, sb runtime.Sandbox, timeout time.Duration) bool {
	if w.full.Load() {
		return true
	}
	full, n, limit := e.atLimit(sb, timeout)
	if full {
		w.seen.Store(n)
		w.limit.Store(limit)
		w.full.Store(true)
	}
	return full
}

// atLimit reports whether the sandbox runs as many processes as it may,
// within a margin: a fork bomb oscillates just below the limit as children
// die and are replaced. It returns what it saw: n of limit.
func (e *Engine) atLimit(sb runtime.Sandbox, timeout time.Duration) (full bool, n, limit int64) {
	p, ok := sb.(runtime.LimitProber)
	if !ok {
		return false, 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	t0 := time.Now()
	n, limit, err := p.Processes(ctx)
	if err != nil {
		e.log.Debug("probe process count", "sandbox", sb.ID(), "took", time.Since(t0), "err", err)
		return false, 0, 0
	}
	return limit > 0 && n >= limit*9/10, n, limit
}

// kill ends the whole sandbox at a deadline or on cancellation. It goes
// through the runtime, not the agent: a fork bomb under a CPU quota can
// starve the agent of the time it needs to answer.
func (e *Engine) kill(sb runtime.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sb.Kill(ctx); err != nil {
		e.log.Warn("kill sandbox", "sandbox", sb.ID(), "err", err)
	}
}

// killGroup ends a step of a live sandbox at its deadline: its process
// group, not the sandbox, whose other processes live on.
func (e *Engine) killGroup(p *agent.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		e.log.Warn("kill a live sandbox's execution", "err", err)
	}
}

func newCapture(keep int, sink Sink) *capture {
	return &capture{stdout: collect.NewStream(keep), stderr: collect.NewStream(keep), sink: sink}
}

// capture collects a process's output for the record and forwards it live.
type capture struct {
	stdout, stderr *collect.Stream
	status         []byte
	sink           Sink
	started        bool // the sink was told (StartObserver)
}

func (c *capture) Stdout(p []byte) {
	c.stdout.Write(p)
	if c.sink != nil {
		c.sink.Stdout(p)
	}
}

func (c *capture) Stderr(p []byte) {
	c.stderr.Write(p)
	if c.sink != nil {
		c.sink.Stderr(p)
	}
}

func (c *capture) Status(p []byte) {
	if len(c.status)+len(p) <= 256 {
		c.status = append(c.status, p...)
	}
}
