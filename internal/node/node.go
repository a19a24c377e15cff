// Package node is the work loop of one corral serve process: it admits
// executions (the store is the queue), claims work when it has capacity,
// runs it through the engine, writes the final record (with its summary,
// its callback and its memory delivery) to the store, streams events,
// cancels across nodes, turns executions of lost nodes into retryable
// internal errors, recovers after a restart and sweeps stray sandboxes.
package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/collect"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// Errors, each of a kind (internal/fault) every wire answers by.
var (
	// ErrConflict: the execution id exists with a different request.
	ErrConflict = &fault.Error{Kind: fault.AlreadyExists, Code: "conflict", Field: "execution_id",
		Message: "this execution_id was already used with a different request; use a new id or resend the same request"}
	// ErrNotFound: no such execution for this tenant.
	ErrNotFound = fault.New(fault.NotFound, "no such execution")
	// ErrQueueFull: the shared queue is at its bound; retry later.
	ErrQueueFull = &fault.Error{Kind: fault.ResourceExhausted, Code: "queue_full", RetryAfter: time.Second,
		Message: "the server's queue is full; retry after the delay in Retry-After"}
)

// Config configures a node.
type Config struct {
	// MaxConcurrency is how many executions this node runs at once.
	MaxConcurrency int
	// QueueBound caps the shared queue; beyond it submissions get
	// ErrQueueFull. Submissions on several nodes at once may overshoot
	// it by as many.
	QueueBound int
	// PollInterval is how often an idle node looks for work when no
	// signal said there is some (signals can be lost).
	PollInterval time.Duration
	// CheckInterval is how often the node compares what it runs with the
	// store: cancels it missed, executions declared lost meanwhile.
	CheckInterval time.Duration
	// ReapInterval is how often lost nodes are looked for.
	ReapInterval time.Duration
	// SweepInterval is how often stray sandboxes are looked for.
	SweepInterval time.Duration
	// EventTTL keeps an execution's event log after it finished.
	EventTTL time.Duration
	// LiveOutputBytes caps what is streamed live per output stream; the
	// record still gets head and tail of everything.
	LiveOutputBytes int64
	// WaitMargin is added to an execution's limits when a client waits.
	WaitMargin time.Duration
	// StoreRetry bounds how long the final record of an execution is
	// retried while the store is unavailable.
	StoreRetry time.Duration
	// MemoryURL, if set, receives every final record's summary (a memory
	// delivery, sent like a callback).
	MemoryURL string
}

// DefaultConfig fills everything but MaxConcurrency and QueueBound.
func DefaultConfig() Config {
	return Config{
		PollInterval:    time.Second,
		CheckInterval:   2 * time.Second,
		ReapInterval:    2 * time.Second,
		SweepInterval:   5 * time.Minute,
		EventTTL:        time.Hour,
		LiveOutputBytes: 4 << 20,
		WaitMargin:      30 * time.Second,
		StoreRetry:      5 * time.Minute,
	}
}

// Deps are what a node works with.
type Deps struct {
	Engine *engine.Engine
	Fleet  *fleet.Fleet
	// Pool lends sandboxes to executions outside sessions; nil: fresh ones
	// from the fleet.
	Pool     fleet.Acquirer
	Store    store.Store
	State    state.State
	Cluster  *cluster.Cluster
	Notifier *notify.Notifier // nil: no callbacks
	Metrics  *metrics.Metrics
	Log      *slog.Logger
	// Sessions keeps sessions; nil: none.
	Sessions *session.Manager
	// Artifacts keeps artifacts; nil: none.
	Artifacts engine.ArtifactStore
	// Audit records what a queued execution does once it runs (its
	// egress), for its tenant; nil records nothing. Its submit is
	// recorded by the caller's context.
	Audit audit.Recorder
}

// Node runs executions. Create it with New, start it with Run.
type Node struct {
	cfg       Config
	recorder  audit.Recorder
	engine    *engine.Engine
	fleet     *fleet.Fleet
	pool      fleet.Acquirer
	store     store.Store
	state     state.State
	cluster   *cluster.Cluster
	notifier  *notify.Notifier
	metrics   *metrics.Metrics
	log       *slog.Logger
	sessions  *session.Manager
	artifacts engine.ArtifactStore

	// ctx is Run's context: executions belong to the node, not to the
	// request that submitted them.
	ctx context.Context
	// wake has room for one token: a submission leaves one so that an
	// idle dispatcher claims at once.
	wake chan struct{}
	// draining is closed by Drain: no more claims.
	draining  chan struct{}
	drainOnce sync.Once

	// turns runs each session's executions in the order they were claimed.
	turns turns

	mu sync.Mutex
	// stopping is set by Drain: no run may start its first process.
	stopping bool
	running  map[string]*run // by key
	// waiters are woken with nil (look again) or the final record as
	// stored (Wait's answer, with no need to read it), by key.
	waiters map[string][]chan *sandbox.Result
	// early holds cancels of executions not running here (yet), by key,
	// with when they came: a claim that registers its run right after
	// still finds them.
	early map[string]time.Time
}

type run struct {
	cancel  context.CancelCauseFunc
	started time.Time
	// began: the execution's first process was about to start (the
	// engine said so); before that, nothing of the request has run.
	began bool
}

// New returns a node; d.Cluster's id is the node's.
func New(cfg Config, d Deps) *Node {
	n := &Node{cfg: cfg, recorder: d.Audit, engine: d.Engine, fleet: d.Fleet, pool: d.Pool, store: d.Store, state: d.State,
		cluster: d.Cluster, notifier: d.Notifier, metrics: d.Metrics, log: d.Log, sessions: d.Sessions,
		artifacts: d.Artifacts, ctx: context.Background(), wake: make(chan struct{}, 1),
		draining: make(chan struct{}), running: map[string]*run{}, waiters: map[string][]chan *sandbox.Result{},
		early: map[string]time.Time{}}
	if n.pool == nil {
		n.pool = fleet.FreshAcquirer{Fleet: d.Fleet}
	}
	return n
}

// id is this node's name in the cluster.
func (n *Node) id() string { return n.cluster.Self() }

// BlobArtifacts keeps artifacts in a blob store.
type BlobArtifacts struct{ Store blob.Store }

// Put implements engine.ArtifactStore.
func (b BlobArtifacts) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (string, error) {
	obj, err := b.Store.Put(ctx, key, r, size, contentType)
	return obj.SHA256, err
}

// Link implements engine.ArtifactStore.
func (b BlobArtifacts) Link(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	return b.Store.SignedURL(ctx, key, ttl)
}

// ArtifactPrefix is where an execution's artifacts are kept.
func ArtifactPrefix(tenant, id string) string { return tenant + "/executions/" + id + "/output/" }

// signArtifacts fills the records' artifact links, valid for the
// configured time from now.
func (n *Node) signArtifacts(ctx context.Context, tenant string, rec *sandbox.Result) {
	if n.artifacts == nil {
		return
	}
	for i := range rec.Artifacts {
		a := &rec.Artifacts[i]
		url, exp, err := n.artifacts.Link(ctx, ArtifactPrefix(tenant, rec.ExecutionID)+a.Path, n.engine.Config().Files.ArtifactTTL)
		if err != nil {
			n.log.Warn("sign artifact link", "execution_id", rec.ExecutionID, "path", a.Path, "err", err)
			continue
		}
		a.URL, a.ExpiresAt = url, exp.UTC()
	}
}

// key names an execution in the shared state: ids are unique per tenant.
func key(tenant, id string) string { return tenant + "/" + id }

// Submission is the outcome of Submit.
type Submission struct {
	Execution *store.Execution
	// Created is false when the id existed with the same request: nothing
	// new was queued.
	Created bool
}

// submitEvent is the audit event of a submitted execution.
func submitEvent(req sandbox.ExecuteRequest) audit.Event {
	f := map[string]string{"language": req.Language, "code_sha256": audit.SHA256([]byte(req.Code)),
		"code_bytes": strconv.Itoa(len(req.Code))}
	if req.SessionID != "" {
		f["session_id"] = req.SessionID
	}
	if req.Network != nil && len(req.Network.Allow) > 0 {
		f["network_allow"] = strings.Join(req.Network.Allow, ",")
	}
	return audit.Event{Action: audit.ExecutionSubmit, ExecutionID: req.ExecutionID, Fields: f}
}

// Submit validates req, and unless the same request was already submitted
// under its id, stores it as queued (the store is the queue) and wakes the
// nodes. An execution of a session is queued for the node that owns the
// session. Errors: *validate.InputError, ErrConflict, ErrQueueFull,
// *cluster.OwnerError, or internal.
func (n *Node) Submit(ctx context.Context, tenant string, req sandbox.ExecuteRequest) (Submission, error) {
	job, err := n.engine.Prepare(req)
	if err != nil {
		n.metrics.Rejected.WithLabelValues("invalid").Inc()
		return Submission{}, err
	}
	body, err := json.Marshal(job.Req)
	if err != nil {
		return Submission{}, fmt.Errorf("encode request: %w", err)
	}
	hash := sha256.Sum256(body)
	ex := &store.Execution{
		Tenant:      tenant,
		ID:          job.Req.ExecutionID,
		RequestHash: hex.EncodeToString(hash[:]),
		Request:     body,
		Record: sandbox.Result{
			ExecutionID: job.Req.ExecutionID,
			SessionID:   job.Req.SessionID,
			Language:    job.Req.Language,
			Status:      sandbox.StatusQueued,
			Tier:        string(job.Tier),
			TierReason:  job.TierReason,
			Image:       job.Image.Name,
			ImageDigest: job.Image.Digest,
			Limits:      job.Req.Limits,
			CreatedAt:   time.Now().UTC(),
		},
	}
	// An id seen before is answered with its execution, whatever else
	// would refuse the request. The insert below finds it too, so the
	// read comes first only where a step before the insert does more than
	// refuse: a session's owner is claimed.
	if sid := job.Req.SessionID; sid != "" {
		if sub, err := n.orExisting(ctx, ex, nil); err != nil || sub.Execution != nil {
			return sub, err
		}
		owner, err := n.cluster.OwnerOf(ctx, tenant, sid, true)
		if err != nil {
			return Submission{}, err
		}
		ex.Target = owner.Node.ID
	}
	if n.cfg.QueueBound > 0 {
		queued, err := n.store.CountQueued(ctx)
		if err != nil {
			return n.orExisting(ctx, ex, fmt.Errorf("count queued executions: %w", err))
		}
		if queued >= n.cfg.QueueBound {
			sub, err := n.orExisting(ctx, ex, ErrQueueFull)
			if errors.Is(err, ErrQueueFull) {
				n.metrics.Rejected.WithLabelValues("queue_full").Inc()
			}
			return sub, err
		}
	}
	stored, created, err := n.store.CreateExecution(ctx, ex)
	if err != nil {
		return Submission{}, fmt.Errorf("store execution: %w", err)
	}
	if !created {
		return n.existing(stored, ex) // a concurrent duplicate won
	}
	audit.Record(ctx, submitEvent(job.Req))
	k := key(tenant, ex.ID)
	if _, err := n.state.Append(ctx, k, state.EventStatus, []byte(sandbox.StatusQueued)); err != nil {
		n.log.WarnContext(ctx, "append event", "execution_id", ex.ID, "err", err)
	}
	n.kick()
	// Other nodes poll too: a lost signal only delays the claim.
	if err := n.state.Notify(ctx, state.ChannelWork, ""); err != nil {
		n.log.DebugContext(ctx, "signal work", "execution_id", ex.ID, "err", err)
	}
	return Submission{Execution: stored, Created: true}, nil
}

// kick wakes this node's dispatcher.
func (n *Node) kick() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// orExisting answers the submission of ex with the execution stored under
// its id, if there is one (existing), and else with refused (no
// Submission, refused as the error).
func (n *Node) orExisting(ctx context.Context, ex *store.Execution, refused error) (Submission, error) {
	prev, err := n.store.GetExecution(ctx, ex.Tenant, ex.ID)
	switch {
	case err == nil:
		return n.existing(prev, ex)
	case errors.Is(err, store.ErrNotFound):
		return Submission{}, refused
	}
	return Submission{}, fmt.Errorf("look up execution: %w", err)
}

func (n *Node) existing(prev, ex *store.Execution) (Submission, error) {
	if prev.RequestHash != ex.RequestHash {
		return Submission{}, ErrConflict
	}
	return Submission{Execution: prev}, nil
}

// Get returns a tenant's execution record, with its callback's delivery
// state.
func (n *Node) Get(ctx context.Context, tenant, id string) (*sandbox.Result, error) {
	ex, err := n.store.GetExecution(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get execution: %w", err)
	}
	rec := ex.Record
	n.signArtifacts(ctx, tenant, &rec)
	if !hasCallback(ex) {
		return &rec, nil
	}
	if ds, err := n.store.Deliveries(ctx, tenant, id); err == nil {
		for _, d := range ds {
			if d.Kind == store.KindCallback {
				rec.Callback = &sandbox.CallbackState{URL: d.URL, State: d.State, Attempts: d.Attempts,
					LastStatus: d.LastStatus, LastError: d.LastError, DeliveryID: d.ID}
				if !d.NextAttempt.IsZero() && d.State == store.DeliveryPending {
					rec.Callback.NextAttempt = d.NextAttempt.UTC()
				}
			}
		}
	}
	return &rec, nil
}

// hasCallback tells whether ex's request may have asked for a callback:
// only then has it a delivery to report. The request was encoded by
// Submit (encoding/json, callback_url omitted when empty), where the key
// followed by its colon cannot appear inside a string; a false yes costs a
// read, and the scan costs nothing like decoding a large program.
func hasCallback(ex *store.Execution) bool {
	return bytes.Contains(ex.Request, []byte(`"callback_url":`))
}

// List returns a tenant's executions matching q.
func (n *Node) List(ctx context.Context, tenant string, q store.Query) ([]sandbox.Result, string, error) {
	exs, next, err := n.store.ListExecutions(ctx, tenant, q)
	if err != nil {
		return nil, "", fmt.Errorf("list executions: %w", err)
	}
	out := make([]sandbox.Result, len(exs))
	for i, ex := range exs {
		out[i] = ex.Record
	}
	return out, next, nil
}

// Wait blocks until the execution is final or ctx ends, and returns its
// record as it is then.
func (n *Node) Wait(ctx context.Context, tenant, id string) (*sandbox.Result, error) {
	k := key(tenant, id)
	ch := make(chan *sandbox.Result, 1)
	n.mu.Lock()
	n.waiters[k] = append(n.waiters[k], ch)
	n.mu.Unlock()
	defer n.unwait(k, ch)
	// Messages can be missed (a Redis reconnect): poll as a fallback.
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		rec, err := n.Get(context.WithoutCancel(ctx), tenant, id)
		if err != nil {
			return nil, err
		}
		if rec.Status.Final() || ctx.Err() != nil {
			return rec, nil
		}
		select {
		case final := <-ch:
			if final != nil {
				return n.signed(context.WithoutCancel(ctx), tenant, final), nil
			}
		case <-poll.C:
		case <-ctx.Done():
		}
	}
}

// signed is a copy of rec with its artifact links signed, as Get returns
// it, leaving rec (the stored record, or one shared by waiters) as it is.
func (n *Node) signed(ctx context.Context, tenant string, rec *sandbox.Result) *sandbox.Result {
	r := *rec
	r.Artifacts = slices.Clone(rec.Artifacts)
	n.signArtifacts(ctx, tenant, &r)
	return &r
}

// WaitDeadline is how long a client waiting for req should be held at most.
func (n *Node) WaitDeadline(l sandbox.Limits) time.Duration {
	return time.Duration(l.TimeoutMS)*time.Millisecond + n.engine.CompileDeadline(l) + n.cfg.WaitMargin
}

func (n *Node) unwait(k string, ch chan *sandbox.Result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ws := n.waiters[k]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(n.waiters, k)
	} else {
		n.waiters[k] = ws
	}
}

// wakeWaiters tells local waiters of k to look again.
func (n *Node) wakeWaiters(k string) { n.handOver(k, nil) }

// handOver wakes the local waiters of k with final, k's final record as
// stored, or nil: look again.
func (n *Node) handOver(k string, final *sandbox.Result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.waiters[k] {
		select {
		case ch <- final:
		default:
			// A wake is pending (the done signal's, nil, may come
			// first): the record takes its place.
			if final != nil {
				select {
				case <-ch:
				default:
				}
				select {
				case ch <- final:
				default:
				}
			}
		}
	}
}

// Cancel stops an execution: a queued one never runs, a running one is
// killed on whichever node runs it. It waits briefly for the final record.
func (n *Node) Cancel(ctx context.Context, tenant, id string) (*sandbox.Result, error) {
	ex, err := n.store.GetExecution(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get execution: %w", err)
	}
	if ex.Record.Status.Final() {
		return n.Get(ctx, tenant, id)
	}
	// The signal first: it reaches the run at once, wherever it is. The
	// flag in the store is for a node that missed it (a Redis restart); a
	// queued execution is cancelled in the store, and one claimed meanwhile
	// finds the signal when it registers (cancelLocal keeps it).
	k := key(tenant, id)
	n.cancelLocal(k, errCancelled)
	if err := n.state.Notify(ctx, state.ChannelCancel, k); err != nil {
		n.log.WarnContext(ctx, "signal cancel; the running node finds it in the store", "execution_id", id, "err", err)
	}
	if err := n.store.RequestCancel(ctx, tenant, id); err != nil {
		return nil, fmt.Errorf("cancel execution: %w", err)
	}
	if ex.Record.Status == sandbox.StatusQueued {
		rec := ex.Record
		rec.Status = sandbox.StatusCancelled
		rec.Error = &sandbox.Failure{Type: sandbox.ErrCancelled, Message: "the execution was cancelled before it started"}
		rec.FinishedAt = time.Now().UTC()
		if err := n.finish(ctx, ex, rec, sandbox.StatusQueued); err == nil {
			return n.Get(ctx, tenant, id)
		} else if !errors.Is(err, store.ErrStale) {
			return nil, err
		}
		// A node claimed it meanwhile: its run has the signal.
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return n.Wait(wctx, tenant, id)
}

// Egress lists an execution's egress attempts.
func (n *Node) Egress(ctx context.Context, tenant, id string) ([]sandbox.EgressAttempt, error) {
	if _, err := n.store.GetExecution(ctx, tenant, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("get execution: %w", err)
	}
	out, err := n.store.Egress(ctx, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("egress attempts: %w", err)
	}
	return out, nil
}

// Events returns an execution's events after the given id, waiting for new
// ones when wait is set. ok is false when the tenant has no such execution.
func (n *Node) Events(ctx context.Context, tenant, id string, after uint64, wait bool) ([]state.Event, error) {
	return n.state.Events(ctx, key(tenant, id), after, wait)
}

// finish stores rec as ex's final record (with its callback and memory
// deliveries) if ex is still in one of from, then tells everyone. Every
// final record of a node passes here, whoever ended it (a run, a cancel,
// the orphan reaper, recovery, an input error), so this is where its
// summary is made.
func (n *Node) finish(ctx context.Context, ex *store.Execution, rec sandbox.Result, from ...sandbox.Status) error {
	ctx = context.WithoutCancel(ctx)
	rec.Summary = collect.Summary(rec, n.engine.Config().SummaryChars)
	ex.Record = rec
	var deliveries []store.Delivery
	var req sandbox.ExecuteRequest
	if hasCallback(ex) && json.Unmarshal(ex.Request, &req) == nil && req.CallbackURL != "" {
		body, err := json.Marshal(n.signed(ctx, ex.Tenant, &rec))
		if err != nil {
			return fmt.Errorf("encode callback: %w", err)
		}
		now := time.Now().UTC()
		deliveries = append(deliveries, store.Delivery{
			ID: newDeliveryID(), Tenant: ex.Tenant, ExecutionID: ex.ID, Kind: store.KindCallback,
			URL: req.CallbackURL, Body: body, State: store.DeliveryPending,
			NextAttempt: now, CreatedAt: now, UpdatedAt: now,
		})
	}
	if n.cfg.MemoryURL != "" {
		d, err := n.memoryDelivery(ex.Tenant, rec, time.Now().UTC())
		if err != nil {
			return err
		}
		deliveries = append(deliveries, d)
	}
	stored, err := n.store.FinishExecution(ctx, ex, deliveries, from...)
	if err != nil {
		return err
	}
	k := key(ex.Tenant, ex.ID)
	if b, err := json.Marshal(rec); err == nil {
		if _, err := n.state.Append(ctx, k, state.EventDone, b); err != nil {
			n.log.WarnContext(ctx, "append event", "execution_id", ex.ID, "err", err)
		}
	}
	_ = n.state.ExpireEvents(ctx, k, n.cfg.EventTTL)
	if err := n.state.Notify(ctx, state.ChannelDone, k); err != nil {
		n.log.WarnContext(ctx, "notify done", "execution_id", ex.ID, "err", err)
	}
	// Local waiters take the record as stored, unless Get adds to it (a
	// callback's state).
	if hasCallback(ex) {
		stored = nil
	}
	n.handOver(k, stored)
	if len(deliveries) > 0 && n.notifier != nil {
		n.notifier.Wake()
	}
	n.metrics.Finished(&rec)
	return nil
}

func newDeliveryID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "dl_" + hex.EncodeToString(b[:])
}
