package engine_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	localblob "github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// lender lends one sandbox, made on its first claim on tier, to every
// execution, with fate, as a session (kept) or a live sandbox (held) does;
// it records how each execution gave it back.
type lender struct {
	fleet *fleet.Fleet
	fate  fleet.Fate
	tier  runtime.Tier
	env   map[string]string // a held sandbox's
	// zygote starts a zygote in the sandbox when it is made (a pool's).
	zygote func(runtime.Sandbox, fleet.Claim) (*fleet.Zygote, error)

	mu     sync.Mutex
	sb     runtime.Sandbox
	z      *fleet.Zygote
	cleans []bool
}

func (l *lender) Acquire(ctx context.Context, c fleet.Claim) (*fleet.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sb == nil {
		sb, err := l.fleet.Create(ctx, l.tier, c.Spec, c.Image, fleet.HolderSession)
		if err != nil {
			return nil, err
		}
		l.sb = sb
		if l.zygote != nil {
			if l.z, err = l.zygote(sb, c); err != nil {
				return nil, err
			}
		}
	}
	lease := fleet.NewLease(l.sb, l.fate, l.z, func(clean bool) {
		l.mu.Lock()
		l.cleans = append(l.cleans, clean)
		l.mu.Unlock()
	})
	if l.fate == fleet.Held {
		lease.Env, lease.Tier, lease.Image = l.env, l.tier, c.Image
	}
	return lease, nil
}

func (l *lender) released() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cleans)
}

// run runs bash code as an execution in the sandbox l lends, with
// artifacts kept in arts (if set).
func (l *lender) run(t *testing.T, f *testenv.Fake, arts engine.ArtifactStore, code string, timeoutMS int64) sandbox.Result {
	t.Helper()
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: code, Tier: sandbox.TierContainer,
		Limits: sandbox.Limits{TimeoutMS: timeoutMS}})
	if err != nil {
		t.Fatal(err)
	}
	job.Artifacts, job.ArtifactPrefix = arts, "out/"
	if err := f.Acquire(t.Context(), job, l); err != nil {
		t.Fatal(err)
	}
	return f.Run(t.Context(), job, nil)
}

// artifactStore is a local blob store as the node keeps artifacts in.
func artifactStore(t *testing.T) engine.ArtifactStore {
	t.Helper()
	bs, err := localblob.New(t.TempDir(), "http://corral.test", nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	return node.BlobArtifacts{Store: bs}
}

func artifactPaths(res sandbox.Result) []string {
	var out []string
	for _, a := range res.Artifacts {
		out = append(out, a.Path)
	}
	return out
}

// TestKeptLease: in a session's kept sandbox an execution finds
// /workspace as the last one left it and /tmp emptied, collects only the
// outputs it wrote, and at its deadline the sandbox is killed and not
// handed on.
func TestKeptLease(t *testing.T) {
	f := testenv.FakeEngine(t)
	arts := artifactStore(t)
	l := &lender{fleet: f.Fleet, fate: fleet.Kept, tier: runtime.TierContainer}
	first := l.run(t, f, arts, `echo t > "$TMPDIR/t"; echo w > w; mkdir -p output; echo old > output/old`, 0)
	if first.Status != sandbox.StatusSuccess || !slices.Equal(artifactPaths(first), []string{"old"}) {
		t.Fatalf("first: %s %+v, artifacts %v", first.Status, first.Error, artifactPaths(first))
	}
	// As if the first had run an hour ago.
	next := l.run(t, f, arts, `touch -d '1 hour ago' output/old; ls "$TMPDIR"; cat w; echo new > output/new`, 0)
	if next.Stdout != "w\n" || !slices.Equal(artifactPaths(next), []string{"new"}) {
		t.Errorf("next: stdout %q (want /tmp empty, /workspace kept), artifacts %v (want only new)", next.Stdout, artifactPaths(next))
	}
	late := l.run(t, f, arts, "sleep 30", 300)
	if late.Error == nil || late.Error.Type != sandbox.ErrTimeout {
		t.Errorf("a sleeping execution: %+v, want a timeout", late.Error)
	}
	select {
	case <-l.sb.Agent().Done():
	case <-time.After(10 * time.Second):
		t.Error("the kept sandbox lives on after its execution's deadline; it is killed")
	}
	if got := l.released(); !slices.Equal(got, []bool{true, true, false}) {
		t.Errorf("released clean %v, want true, true, then false (killed)", got)
	}
}

// TestHeldLease: in a live sandbox's held sandbox an execution runs beside
// the sandbox's processes: it empties nothing, brings no egress proxy of
// its own (the sandbox's variables are its environment), its record names
// the sandbox's tier, and at its deadline only its own processes go.
func TestHeldLease(t *testing.T) {
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.Network.Allow = []string{"*.example.com"} })
	l := &lender{fleet: f.Fleet, fate: fleet.Held, tier: runtime.TierGVisor, env: map[string]string{"GREETING": "hi"}}
	first := l.run(t, f, nil, `echo t > "$TMPDIR/t"; echo "$GREETING"`, 0)
	if first.Stdout != "hi\n" || first.Tier != "gvisor" || first.TierReason != "runs in the session's live sandbox" {
		t.Fatalf("first: stdout %q, tier %s (%q)", first.Stdout, first.Tier, first.TierReason)
	}
	// The sandbox's own process, as a live sandbox starts them.
	bg, err := l.sb.Agent().Start(t.Context(), agent.StartRequest{Argv: []string{"sleep", "300"}, Dir: "/workspace", Persistent: true}, discard{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bg.Signal(context.Background(), 9) })
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: `ls "$TMPDIR"; echo "proxy=$HTTP_PROXY"`,
		Network: &sandbox.Network{Allow: []string{"api.example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Acquire(t.Context(), job, l); err != nil {
		t.Fatal(err)
	}
	if next := f.Run(t.Context(), job, nil); next.Stdout != "t\nproxy=\n" {
		t.Errorf("next: stdout %q, want /tmp as the last left it and no proxy of its own", next.Stdout)
	}
	late := l.run(t, f, nil, "sleep 30", 300)
	if late.Error == nil || late.Error.Type != sandbox.ErrTimeout {
		t.Errorf("a sleeping execution: %+v, want a timeout", late.Error)
	}
	select {
	case <-bg.Done():
		t.Error("the sandbox's own process ended with an execution's deadline")
	case <-l.sb.Agent().Done():
		t.Error("the held sandbox was killed at an execution's deadline")
	default:
	}
}

type discard struct{}

func (discard) Stdout([]byte) {}
func (discard) Stderr([]byte) {}
func (discard) Status([]byte) {}

// TestKeptLeaseLimitsHit: a program that recovers from the process limit
// in a kept sandbox has it in its record's limits hit; the next program in
// the sandbox inherits neither that nor a verdict from the kernel's
// counters, which count over the sandbox's life (here, the fake's, set
// when the first program has run).
func TestKeptLeaseLimitsHit(t *testing.T) {
	f := testenv.FakeEngine(t)
	var armed atomic.Int32 // 1: the next stats read finds the limit hit
	f.Runtimes[runtime.TierContainer].SetHook(func(c fake.Call) error {
		switch {
		case c.Op == "reset-stats" && armed.CompareAndSwap(0, 1):
		case c.Op == "stats" && armed.CompareAndSwap(1, 2):
			c.Sandbox.SetStats(runtime.Stats{PidsLimitHits: 3})
		}
		return nil
	})
	l := &lender{fleet: f.Fleet, fate: fleet.Kept, tier: runtime.TierContainer}
	bomb := l.run(t, f, nil, "exit 0", 0)
	if bomb.Status != sandbox.StatusSuccess || len(bomb.LimitsHit) != 1 || bomb.LimitsHit[0].Limit != sandbox.LimitProcesses {
		t.Fatalf("first: %s %+v, limits_hit %+v", bomb.Status, bomb.Error, bomb.LimitsHit)
	}
	next := l.run(t, f, nil, "echo failing >&2; exit 3", 0)
	if next.Error == nil || next.Error.Type != sandbox.ErrRuntime || len(next.LimitsHit) != 0 {
		t.Errorf("next: %s %+v, limits_hit %+v", next.Status, next.Error, next.LimitsHit)
	}
}

// TestPooledLeaseZygote: a python execution lent a sandbox with a python
// zygote is forked by it, and finds what the zygote imported; a bash one
// there, or a python one that needs another interpreter's start, runs on
// its own.
func TestPooledLeaseZygote(t *testing.T) {
	f := testenv.FakeEngine(t)
	l := &lender{fleet: f.Fleet, fate: fleet.Pooled, tier: runtime.TierContainer,
		zygote: func(sb runtime.Sandbox, c fleet.Claim) (*fleet.Zygote, error) {
			return f.StartZygote(t.Context(), sb, "python", c.Image, []string{"decimal"})
		}}
	const code = "import sys; print('decimal' in sys.modules)"
	for _, c := range []struct {
		name string
		req  sandbox.ExecuteRequest
		want string
	}{
		{"forked", sandbox.ExecuteRequest{Language: "python", Code: code}, "True\n"},
		{"another start", sandbox.ExecuteRequest{Language: "python", Code: code, Env: map[string]string{"PYTHONOPTIMIZE": "1"}}, "False\n"},
		{"another language", sandbox.ExecuteRequest{Language: "bash", Code: "echo bash"}, "bash\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			job, err := f.Prepare(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Acquire(t.Context(), job, l); err != nil {
				t.Fatal(err)
			}
			if res := f.Run(t.Context(), job, nil); res.Stdout != c.want {
				t.Errorf("stdout %q, want %q (%s)", res.Stdout, c.want, res.Summary)
			}
		})
	}
	// The CPU it keeps to, from its ready message, for the pool.
	if l.z == nil || l.z.Language != "python" || l.z.CPU < 0 {
		t.Errorf("zygote %+v", l.z)
	}
}
