package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/tracing"
	"github.com/corralhq/corral/sandbox"
)

var (
	errCancelled = errors.New("cancelled by a client")
	errLost      = errors.New("no longer running here, by the store")
	errHandBack  = errors.New("handed back: the node is stopping")
)

// Run starts the node's workers and background loops and blocks until ctx
// ends; then running executions are cancelled and Run returns once they
// are recorded.
func (n *Node) Run(ctx context.Context) error {
	n.ctx = ctx
	var wg sync.WaitGroup
	spawn := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	spawn(func() { n.listen(ctx, state.ChannelCancel, func(k string) { n.cancelLocal(k, errCancelled) }) })
	spawn(func() { n.listen(ctx, state.ChannelDone, n.wakeWaiters) })
	spawn(func() { n.listen(ctx, state.ChannelWork, func(string) { n.kick() }) })
	if err := n.recover(ctx); err != nil {
		n.log.Error("recover after restart", "err", err)
	}
	spawn(func() { n.dispatch(ctx) })
	spawn(func() { n.every(ctx, n.cfg.CheckInterval, n.check) })
	spawn(func() { n.every(ctx, n.cfg.ReapInterval, n.reapLost) })
	spawn(func() { n.every(ctx, n.cfg.SweepInterval, n.sweep) })
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

// listen calls f with every message on channel until ctx ends,
// subscribing again whenever the subscription fails or ends: the state
// may be down for a while (a Redis restart) without stopping the node.
func (n *Node) listen(ctx context.Context, channel string, f func(string)) {
	for pause := 100 * time.Millisecond; ctx.Err() == nil; pause = min(2*pause, 5*time.Second) {
		msgs, err := n.state.Subscribe(ctx, channel)
		if err != nil {
			n.log.Warn("subscribe to signals; retrying", "channel", channel, "err", err)
		} else {
			for m := range msgs {
				f(m)
				pause = 100 * time.Millisecond
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// dispatch claims work whenever this node has a free slot: one claim at a
// time, however many slots there are. With nothing to claim it waits for
// a signal, or polls.
func (n *Node) dispatch(ctx context.Context) {
	slots := make(chan struct{}, n.cfg.MaxConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	failing := time.Duration(0)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		case <-n.draining:
			return
		}
		select {
		case <-n.draining:
			return
		default:
		}
		claimed := time.Now()
		ex, err := n.store.ClaimExecution(ctx, n.id(), claimed)
		if err == nil {
			if failing > 0 {
				n.log.Info("claiming work again")
				failing = 0
			}
			tu := n.turns.take(ex.Tenant, ex.Record.SessionID)
			ectx, span := traceExecution(ctx, ex, claimed)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				defer tu.done()
				defer span.End()
				n.execute(ectx, ex, tu)
			}()
			continue
		}
		<-slots
		if ctx.Err() != nil {
			return
		}
		wait := n.cfg.PollInterval
		if !errors.Is(err, store.ErrNotFound) {
			if failing == 0 {
				n.log.Warn("claim work; retrying", "err", err)
			}
			failing = min(max(2*failing, 50*time.Millisecond), 5*time.Second)
			wait = failing
		}
		select {
		case <-n.wake:
		case <-time.After(wait):
		case <-ctx.Done():
			return
		case <-n.draining:
			return
		}
	}
}

// Drain stops this node from claiming work and from starting any: what it
// claimed but whose first process has not started is handed back to the
// queue (another node runs it), and Drain waits until the rest has
// finished or ctx ends, whichever comes first. What still runs when Run's
// context ends is recorded as a retryable failure.
func (n *Node) Drain(ctx context.Context) {
	n.drainOnce.Do(func() { close(n.draining) })
	// What has not started is new work: back to the queue, now.
	n.mu.Lock()
	n.stopping = true
	var waiting []*run
	for _, r := range n.running {
		if !r.began {
			waiting = append(waiting, r)
		}
	}
	n.mu.Unlock()
	for _, r := range waiting {
		r.cancel(errHandBack)
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		n.mu.Lock()
		left := len(n.running)
		n.mu.Unlock()
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			n.log.Warn("drain ran out of time", "running", left)
			return
		case <-t.C:
		}
	}
}

// Running is how many executions this node runs now.
func (n *Node) Running() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.running)
}

// earlyTTL is how long a cancel for an execution this node does not run is
// kept for a run that may register right after.
const earlyTTL = 10 * time.Second

// cancelLocal cancels k if it runs on this node, or keeps the cancel for a
// moment in case its run is about to start here.
func (n *Node) cancelLocal(k string, cause error) {
	n.mu.Lock()
	r := n.running[k]
	if r == nil {
		now := time.Now()
		for ek, at := range n.early {
			if now.Sub(at) > earlyTTL {
				delete(n.early, ek)
			}
		}
		n.early[k] = now
	}
	n.mu.Unlock()
	if r != nil {
		r.cancel(cause)
	}
}

// register makes r the run of k, cancelled at once if a cancel came first.
func (n *Node) register(k string, r *run) {
	n.mu.Lock()
	n.running[k] = r
	_, early := n.early[k]
	delete(n.early, k)
	n.mu.Unlock()
	if early {
		r.cancel(errCancelled)
	}
}

// execute runs one claimed execution (running on this node) to its final
// record; tu is its turn in its session's line (nil without a session).
func (n *Node) execute(ctx context.Context, ex *store.Execution, tu *turn) {
	tenant, id := ex.Tenant, ex.ID
	k := key(tenant, id)
	runCtx, cancel := context.WithCancelCause(audit.WithExecution(audit.With(ctx, n.recorder, audit.Actor{Tenant: tenant}), id))
	defer cancel(nil)
	r := &run{cancel: cancel, started: time.Now()}
	n.register(k, r)
	n.metrics.InFlight.Inc()
	defer func() {
		n.mu.Lock()
		delete(n.running, k)
		n.mu.Unlock()
		n.metrics.InFlight.Dec()
	}()
	if ex.Cancel {
		cancel(errCancelled)
	}
	n.metrics.QueueWait.Observe(float64(ex.Record.QueueMS) / 1000)
	var req sandbox.ExecuteRequest
	if err := json.Unmarshal(ex.Request, &req); err != nil {
		n.fail(ex, fmt.Errorf("decode stored request: %w", err))
		return
	}
	job, err := n.engine.Prepare(req)
	if err != nil {
		// The request was valid when accepted; the server's limits or
		// images changed since.
		rec := ex.Record
		rec.Status = sandbox.StatusFailed
		rec.Error = &sandbox.Failure{Type: sandbox.ErrInput, Message: err.Error()}
		if errors.Is(err, engine.ErrTierPending) || errors.Is(err, engine.ErrImagePending) { // still being installed or built here
			rec.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: " + err.Error(), Retryable: true}
		}
		rec.FinishedAt = time.Now().UTC()
		n.record(ex, rec)
		return
	}
	job.Tenant = tenant
	if n.artifacts != nil {
		job.Artifacts, job.ArtifactPrefix = n.artifacts, ArtifactPrefix(tenant, id)
	}
	job.Audit = func(attempts []netpolicy.Attempt) { n.audit(tenant, id, attempts) }
	_, _ = n.state.Append(ctx, k, state.EventStatus, []byte(sandbox.StatusRunning))

	sink := newSink(n, k, n.cfg.LiveOutputBytes, r)
	tctx, span := tracing.Start(runCtx, "execution.run")
	res := n.run(tctx, job, sink, tu)
	endRun(span, res)
	tu.done() // the session is free for its next execution
	sink.close()

	rec := ex.Record
	res.ExecutionID, res.SessionID, res.CreatedAt, res.QueueMS = rec.ExecutionID, rec.SessionID, rec.CreatedAt, rec.QueueMS
	n.mu.Lock()
	began, stopping := r.began, n.stopping
	n.mu.Unlock()
	switch cause := context.Cause(runCtx); {
	case !began && (ctx.Err() != nil || stopping):
		n.handBack(ex)
		return
	case ctx.Err() != nil:
		res.Status = sandbox.StatusFailed
		res.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: the node running it shut down; retry", Retryable: true}
	case errors.Is(cause, errLost):
		return // it was declared lost, and recorded so
	}
	if !n.record(ex, res) {
		return
	}
	et := ""
	if res.Error != nil {
		et = string(res.Error.Type)
	}
	n.log.InfoContext(ctx, "execution", "execution_id", id, "session_id", res.SessionID, "tenant", tenant,
		"language", res.Language, "status", res.Status, "error_type", et, "tier", res.Tier,
		"duration_ms", res.DurationMS, "queue_ms", res.QueueMS, "peak_memory_mb", res.PeakMemoryMB)
}

// traceExecution opens the span of an execution claimed at claimed (a
// trace of its own: the call that queued it may be long gone), with the
// claim's as its first child.
func traceExecution(ctx context.Context, ex *store.Execution, claimed time.Time) (context.Context, trace.Span) {
	ctx, span := tracing.Start(ctx, "execution", trace.WithTimestamp(claimed))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("corral.execution_id", ex.ID), attribute.String("corral.tenant", ex.Tenant),
			attribute.String("corral.session_id", ex.Record.SessionID), attribute.Int64("corral.queue_ms", ex.Record.QueueMS))
		_, claim := tracing.Start(ctx, "queue.claim", trace.WithTimestamp(claimed))
		claim.End()
	}
	return ctx, span
}

// endRun ends an execution's run span with its verdict.
func endRun(span trace.Span, res sandbox.Result) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("corral.status", string(res.Status)), attribute.String("corral.tier", res.Tier))
		if res.Error != nil {
			span.SetAttributes(attribute.String("corral.error_type", string(res.Error.Type)))
			if res.Error.Type == sandbox.ErrInternal {
				span.SetStatus(codes.Error, res.Error.Message)
			}
		}
	}
	span.End()
}

// record stores the final record of an execution this node ran, retrying
// while the store is unavailable (for up to StoreRetry): the work is done
// and must not be lost to a database restart. It reports whether the
// record was stored.
func (n *Node) record(ex *store.Execution, rec sandbox.Result) bool {
	deadline := time.Now().Add(n.cfg.StoreRetry)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		err := n.finish(context.Background(), ex, rec, sandbox.StatusRunning)
		switch {
		case err == nil:
			return true
		case errors.Is(err, store.ErrStale):
			n.log.Warn("execution finished after it was declared lost or cancelled", "execution_id", ex.ID)
			return false
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid), time.Now().After(deadline):
			n.log.Error("record execution", "execution_id", ex.ID, "err", err)
			return false
		}
		n.log.Warn("record execution; retrying", "execution_id", ex.ID, "err", err)
		time.Sleep(pause)
	}
}

// run runs job in a sandbox lent by its session, if it has one, or by the
// pool.
func (n *Node) run(ctx context.Context, job *engine.Job, sink engine.Sink, tu *turn) sandbox.Result {
	acq := n.pool
	if sid := job.Req.SessionID; sid != "" && n.sessions != nil {
		if err := tu.wait(ctx); err != nil {
			return n.engine.Failed(ctx, job, err)
		}
		acq = n.sessions.Acquirer(job.Tenant, sid)
	}
	if err := n.engine.Acquire(ctx, job, acq); err != nil {
		return n.engine.Failed(ctx, job, err)
	}
	return n.engine.Run(ctx, job, sink)
}

// handBack returns an execution this node claimed, but whose first
// process never started, to the queue: another node (or this one, back)
// runs it. Only the node running it may: the update is conditional on
// running.
//
// The queued event goes into the log before the record changes: once the
// record says queued, any node may claim it and log running, and the log
// must show the hand-back before that claim. If the update then fails the
// record was no longer running (cancelled, or declared lost and requeued),
// and whoever changed it logs what it became.
func (n *Node) handBack(ex *store.Execution) {
	ex.Record.Status, ex.Record.QueueMS, ex.Node = sandbox.StatusQueued, 0, ""
	_, _ = n.state.Append(context.Background(), key(ex.Tenant, ex.ID), state.EventStatus, []byte(sandbox.StatusQueued))
	deadline := time.Now().Add(n.cfg.StoreRetry)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		err := n.store.UpdateExecution(context.Background(), ex, sandbox.StatusRunning)
		switch {
		case err == nil:
			n.log.Info("execution handed back to the queue", "execution_id", ex.ID)
			_ = n.state.Notify(context.Background(), state.ChannelWork, "")
			return
		case errors.Is(err, store.ErrStale), errors.Is(err, store.ErrNotFound), time.Now().After(deadline):
			n.log.Warn("hand an execution back", "execution_id", ex.ID, "err", err)
			return
		}
		time.Sleep(pause)
	}
}

// fail records an execution that Corral could not run.
func (n *Node) fail(ex *store.Execution, cause error) {
	n.log.Error("execution failed inside corral", "execution_id", ex.ID, "err", cause)
	rec := ex.Record
	rec.Status = sandbox.StatusFailed
	rec.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: " + cause.Error(), Retryable: true}
	rec.FinishedAt = time.Now().UTC()
	n.record(ex, rec)
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

// Starting implements engine.StartObserver: no first process starts on a
// node that is stopping (Drain hands the execution back instead).
func (s *sink) Starting() bool {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	if s.n.stopping {
		return false
	}
	s.r.began = true
	return true
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
