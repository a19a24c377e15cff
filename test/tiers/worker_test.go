package tiers

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/state/memory"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/sandbox"
)

// stubRuntime names its tier and creates nothing: these executions never
// reach a sandbox.
type stubRuntime struct{ tier runtime.Tier }

func (s stubRuntime) Tier() runtime.Tier { return s.tier }
func (s stubRuntime) Create(context.Context, runtime.Spec) (runtime.Sandbox, error) {
	return nil, errors.New("stub runtime")
}
func (s stubRuntime) Reap(context.Context) (int, error) { return 0, nil }

type anyImage struct{}

func (anyImage) Resolve(name string) (images.Image, error) { return images.Image{Name: name}, nil }

// TestWorkerMeetsPendingTier: node A, with gVisor, accepts an execution
// for it; node B, sharing the queue but still installing gVisor, takes it.
// The record fails as Corral's own, retryable, error: nothing runs on
// another tier, and the client knows to send it again.
func TestWorkerMeetsPendingTier(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.DiscardHandler)
	ls := memory.New(log)
	defer ls.Close()
	newEngine := func(name string, rts ...runtime.Runtime) *engine.Engine {
		e, err := engine.New(engine.DefaultConfig(), fleet.New(fleet.Config{}, rts, nil, nil), anyImage{}, filepath.Join(dir, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	}
	withGVisor := newEngine("a", stubRuntime{runtime.TierContainer}, stubRuntime{runtime.TierGVisor})
	installing := newEngine("b", stubRuntime{runtime.TierContainer})
	installing.Fleet().SetPending(runtime.TierGVisor, true)

	cfg := node.DefaultConfig()
	cfg.MaxConcurrency, cfg.QueueBound = 1, 10
	member := func(id string) *cluster.Cluster {
		return cluster.New(cluster.Config{ID: id, Address: "127.0.0.1:1", Heartbeat: time.Second, LostAfter: time.Minute}, st, log)
	}
	nodeOf := func(e *engine.Engine, id string) *node.Node {
		return node.New(cfg, node.Deps{Engine: e, Fleet: e.Fleet(), Store: st, State: ls, Cluster: member(id),
			Metrics: metrics.New(), Log: log})
	}
	a, b := nodeOf(withGVisor, "a"), nodeOf(installing, "b")

	req := sandbox.ExecuteRequest{Language: "python", Code: "print(1)", Isolation: sandbox.IsolationGVisor}
	if _, err := b.Submit(ctx, "alpha", req); !errors.Is(err, engine.ErrTierPending) {
		t.Fatalf("submit to the installing node: %v, want ErrTierPending", err)
	}
	sub, err := a.Submit(ctx, "alpha", req)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rec, err := b.Wait(wctx, "alpha", sub.Execution.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != sandbox.StatusFailed || rec.Error == nil || rec.Error.Type != sandbox.ErrInternal || !rec.Error.Retryable {
		t.Fatalf("record %s %+v, want a retryable internal_error", rec.Status, rec.Error)
	}
	if rec.Tier != "gvisor" {
		t.Errorf("record says tier %q, want gvisor", rec.Tier)
	}
}
