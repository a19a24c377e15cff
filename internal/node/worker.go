package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

var (
	errCancelled = errors.New("cancelled by a client")
	errLost      = errors.New("declared lost by the orphan reaper")
)

// Run starts the node's workers and background loops and blocks until ctx
// ends; then running executions are cancelled and Run returns once they
// are recorded.
func (n *Node) Run(ctx context.Context) error {
	n.ctx = ctx
	cancels, err := n.state.Subscribe(ctx, state.ChannelCancel)
	if err != nil {
		return fmt.Errorf("subscribe to cancellations: %w", err)
	}
	dones, err := n.state.Subscribe(ctx, state.ChannelDone)
	if err != nil {
		return fmt.Errorf("subscribe to completions: %w", err)
	}
	if err := n.recover(ctx); err != nil {
		n.log.Error("recover after restart", "err", err)
	}
	var wg sync.WaitGroup
	spawn := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	spawn(func() { n.dispatch(ctx) })
	spawn(func() {
		for k := range cancels {
			n.cancelLocal(k, errCancelled)
		}
	})
	spawn(func() {
		for k := range dones {
			n.wakeWaiters(k)
		}
	})
	spawn(func() { n.every(ctx, n.cfg.ReapInterval, n.reapOrphans) })
	spawn(func() { n.every(ctx, n.cfg.SweepInterval, n.sweep) })
	spawn(func() {
		n.every(ctx, time.Second, func(ctx context.Context) {
			if l, err := n.state.QueueLen(ctx); err == nil {
				n.metrics.Queued.Set(float64(l))
			}
		})
	})
	wg.Wait()
	return nil
}

// every runs f now and then every d until ctx ends.
func (n *Node) every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dispatch pulls work from the shared queue whenever this node has a free
// slot: one blocking dequeue at a time, however many slots there are.
func (n *Node) dispatch(ctx context.Context) {
	slots := make(chan struct{}, n.cfg.MaxConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		k, err := n.state.Dequeue(ctx)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return
			}
			n.log.Warn("dequeue", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			n.execute(ctx, k)
		}()
	}
}

// cancelLocal cancels k if it runs on this node.
func (n *Node) cancelLocal(k string, cause error) {
	n.mu.Lock()
	r := n.running[k]
	n.mu.Unlock()
	if r != nil {
		r.cancel(cause)
	}
}

// fetch loads the execution a queue entry names; the submitter enqueues
// before it stores, so a fresh entry may briefly have no record yet. A
// submission on this node hands its record over; one elsewhere is polled
// for.
func (n *Node) fetch(ctx context.Context, tenant, id string) (*store.Execution, error) {
	n.mu.Lock()
	handoff := n.storing[key(tenant, id)]
	n.mu.Unlock()
	if handoff != nil {
		select {
		case <-handoff.done:
			if handoff.stored != nil {
				// A copy: the worker changes it, the submitter reads its own.
				ex := *handoff.stored
				return &ex, nil
			}
			// Not stored by that submission (a duplicate, a failure):
			// the store has the answer.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// The record usually lands within a millisecond or two: retry soon,
	// then back off, for about a second in all.
	delay := time.Millisecond
	for waited := time.Duration(0); ; waited += delay {
		ex, err := n.store.GetExecution(ctx, tenant, id)
		if !errors.Is(err, store.ErrNotFound) || waited >= time.Second {
			return ex, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// execute runs one queued execution to its final record.
func (n *Node) execute(ctx context.Context, k string) {
	tenant, id := splitKey(k)
	ex, err := n.fetch(ctx, tenant, id)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			n.log.Error("load queued execution", "execution_id", id, "err", err)
		}
		return
	}
	if ex.Record.Status != sandbox.StatusQueued {
		return // a duplicate queue entry, or cancelled while queued
	}
	var req sandbox.ExecuteRequest
	if err := json.Unmarshal(ex.Request, &req); err != nil {
		n.fail(ctx, ex, fmt.Errorf("decode stored request: %w", err), sandbox.StatusQueued)
		return
	}
	job, err := n.engine.Prepare(req)
	if err != nil {
		// The request was valid when accepted; the server's limits or
		// images changed since.
		rec := ex.Record
		rec.Status = sandbox.StatusFailed
		rec.Error = &sandbox.Failure{Type: sandbox.ErrInput, Message: err.Error()}
		if errors.Is(err, engine.ErrTierPending) { // this node's tier is still being installed
			rec.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: " + err.Error(), Retryable: true}
		}
		rec.FinishedAt = time.Now().UTC()
		if err := n.finish(ctx, ex, rec, sandbox.StatusQueued); err != nil && !errors.Is(err, store.ErrStale) {
			n.log.Error("record execution", "execution_id", id, "err", err)
		}
		return
	}
	job.Tenant = tenant
	if req.SessionID != "" && n.sessions != nil {
		job.Acquirer = n.sessions.Acquirer(tenant, req.SessionID)
	}
	if n.artifacts != nil {
		job.Artifacts, job.ArtifactPrefix = n.artifacts, ArtifactPrefix(tenant, id)
	}
	job.Audit = func(attempts []netpolicy.Attempt) { n.audit(tenant, id, attempts) }
	now := time.Now().UTC()
	timeout := time.Duration(req.Limits.TimeoutMS) * time.Millisecond
	// Registered before the record says running, so that a cancellation
	// sent as soon as a client sees "running" finds the run.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &run{cancel: cancel, started: now, timeout: timeout}
	n.mu.Lock()
	n.running[k] = r
	n.mu.Unlock()
	n.metrics.InFlight.Inc()
	defer func() {
		n.mu.Lock()
		delete(n.running, k)
		n.mu.Unlock()
		n.metrics.InFlight.Dec()
	}()
	rec := ex.Record
	rec.Status = sandbox.StatusRunning
	rec.QueueMS = now.Sub(rec.CreatedAt).Milliseconds()
	ex.Record, ex.Node = rec, n.cfg.ID
	if err := n.store.UpdateExecution(ctx, ex, sandbox.StatusQueued); err != nil {
		if !errors.Is(err, store.ErrStale) {
			n.log.Error("mark execution running", "execution_id", id, "err", err)
		}
		return
	}
	n.metrics.QueueWait.Observe(float64(rec.QueueMS) / 1000)
	live := state.Live{ID: k, Tenant: tenant, Status: sandbox.StatusRunning, Node: n.cfg.ID,
		StartedAt: now, Heartbeat: now, TimeoutMS: req.Limits.TimeoutMS}
	if err := n.state.SetLive(ctx, live); err != nil {
		n.fail(ctx, ex, fmt.Errorf("record live state: %w", err), sandbox.StatusRunning)
		return
	}
	_, _ = n.state.Append(ctx, k, state.EventStatus, []byte(sandbox.StatusRunning))

	hbDone := make(chan struct{})
	var hbWG sync.WaitGroup
	hbWG.Add(1)
	go func() {
		defer hbWG.Done()
		n.heartbeat(runCtx, k, &live, r, hbDone)
	}()

	sink := newSink(n, k, n.cfg.LiveOutputBytes, r)
	res := n.engine.Run(runCtx, job, sink)
	sink.close()
	close(hbDone)
	hbWG.Wait()

	res.ExecutionID, res.SessionID, res.CreatedAt, res.QueueMS = rec.ExecutionID, rec.SessionID, rec.CreatedAt, rec.QueueMS
	switch cause := context.Cause(runCtx); {
	case ctx.Err() != nil:
		res.Status = sandbox.StatusFailed
		res.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: the node running it shut down; retry", Retryable: true}
	case errors.Is(cause, errLost):
		return // the orphan reaper recorded it already
	}
	if err := n.finish(ctx, ex, res, sandbox.StatusRunning); err != nil {
		if errors.Is(err, store.ErrStale) {
			n.log.Warn("execution finished after it was declared lost", "execution_id", id)
		} else {
			n.log.Error("record execution", "execution_id", id, "err", err)
		}
		return
	}
	et := ""
	if res.Error != nil {
		et = string(res.Error.Type)
	}
	n.log.Info("execution", "execution_id", id, "session_id", res.SessionID, "tenant", tenant,
		"language", res.Language, "status", res.Status, "error_type", et, "tier", res.Tier,
		"duration_ms", res.DurationMS, "queue_ms", res.QueueMS, "peak_memory_mb", res.PeakMemoryMB)
}

// fail records an execution that Corral could not run.
func (n *Node) fail(ctx context.Context, ex *store.Execution, cause error, from sandbox.Status) {
	n.log.Error("execution failed inside corral", "execution_id", ex.ID, "err", cause)
	rec := ex.Record
	rec.Status = sandbox.StatusFailed
	rec.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: " + cause.Error(), Retryable: true}
	rec.FinishedAt = time.Now().UTC()
	if err := n.finish(ctx, ex, rec, from); err != nil && !errors.Is(err, store.ErrStale) {
		n.log.Error("record execution", "execution_id", ex.ID, "err", err)
	}
}

// heartbeat refreshes k's live entry until done; if the entry is gone (an
// orphan reaper declared this node lost), the run is abandoned.
func (n *Node) heartbeat(ctx context.Context, k string, live *state.Live, r *run, done <-chan struct{}) {
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	sandboxSet := false
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		n.mu.Lock()
		sb := r.sandboxID
		n.mu.Unlock()
		if sb != "" && !sandboxSet {
			live.SandboxID, live.Heartbeat = sb, time.Now().UTC()
			if err := n.state.SetLive(ctx, *live); err == nil {
				sandboxSet = true
			}
			continue
		}
		err := n.state.Heartbeat(ctx, k, n.cfg.ID, time.Now().UTC())
		if errors.Is(err, state.ErrNotFound) {
			r.cancel(errLost)
			return
		}
		if err != nil && ctx.Err() == nil {
			n.log.Warn("heartbeat", "execution", k, "err", err)
		}
	}
}

// sink streams a run's output into its event log in batches, up to a cap
// per stream, and notes the sandbox id for the live entry.
type sink struct {
	n     *Node
	k     string
	limit int64
	r     *run

	mu      sync.Mutex
	typ     string
	buf     []byte
	sent    map[string]int64
	cut     map[string]bool
	flusher chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

const batchBytes = 16 << 10

func newSink(n *Node, k string, limit int64, r *run) *sink {
	s := &sink{n: n, k: k, limit: limit, r: r, sent: map[string]int64{}, cut: map[string]bool{}, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.mu.Lock()
				s.flushLocked()
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *sink) Sandbox(id string) {
	s.n.mu.Lock()
	s.r.sandboxID = id
	s.n.mu.Unlock()
}

func (s *sink) Stdout(p []byte) { s.add(state.EventStdout, p) }
func (s *sink) Stderr(p []byte) { s.add(state.EventStderr, p) }

func (s *sink) add(typ string, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut[typ] {
		return
	}
	if s.typ != typ {
		s.flushLocked()
		s.typ = typ
	}
	room := s.limit - s.sent[typ] - int64(len(s.buf))
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		s.cut[typ] = true
	}
	s.buf = append(s.buf, p...)
	if len(s.buf) >= batchBytes {
		s.flushLocked()
	}
	if s.cut[typ] {
		s.flushLocked()
		msg := fmt.Sprintf("live %s stopped after %d bytes; the record keeps the head and tail", typ, s.limit)
		_, _ = s.n.state.Append(context.Background(), s.k, state.EventNotice, []byte(msg))
	}
}

func (s *sink) flushLocked() {
	if len(s.buf) == 0 {
		return
	}
	if _, err := s.n.state.Append(context.Background(), s.k, s.typ, s.buf); err != nil {
		s.n.log.Debug("append output event", "execution", s.k, "err", err)
	}
	s.sent[s.typ] += int64(len(s.buf))
	s.buf = s.buf[:0]
}

func (s *sink) close() {
	close(s.done)
	s.wg.Wait()
	s.mu.Lock()
	s.flushLocked()
	s.mu.Unlock()
}

// audit stores an execution's egress attempts.
func (n *Node) audit(tenant, id string, attempts []netpolicy.Attempt) {
	if len(attempts) == 0 {
		return
	}
	out := make([]sandbox.EgressAttempt, len(attempts))
	for i, a := range attempts {
		out[i] = sandbox.EgressAttempt{Time: a.Time, Method: a.Method, Host: a.Host, Port: a.Port, Allowed: a.Allowed,
			Reason: a.Reason, Address: a.Address, Status: a.Status, BytesUp: a.BytesUp, BytesDown: a.BytesDown}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.store.AddEgress(ctx, tenant, id, out); err != nil {
		n.log.Error("record egress attempts", "execution_id", id, "err", err)
	}
}
