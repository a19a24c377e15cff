package fleet_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
)

// TestFresh: a fresh lease is a new sandbox held by its execution,
// destroyed when it is given back, whether it ended clean or not.
func TestFresh(t *testing.T) {
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	rt := u.rts[runtime.TierContainer]
	var acq fleet.Acquirer = fleet.FreshAcquirer{Fleet: u.f}
	var seen []string
	for _, clean := range []bool{true, false} {
		l, err := acq.Acquire(t.Context(), fleet.Claim{Tier: runtime.TierContainer, Image: image("a"), Tenant: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Fate != fleet.Destroyed || l.Zygote != nil || l.Env != nil || l.Tier != "" {
			t.Errorf("a fresh lease: fate %v, zygote %v, env %v, tier %q; want destroyed and nothing else", l.Fate, l.Zygote, l.Env, l.Tier)
		}
		if slices.Contains(seen, l.Sandbox.ID()) {
			t.Errorf("lease %s served before", l.Sandbox.ID())
		}
		seen = append(seen, l.Sandbox.ID())
		u.wantHolder(l.Sandbox, fleet.HolderExecution, true)
		u.wantHolds(map[string]int{"sha256:a": 1})
		answers(t, l.Sandbox)

		l.Release(clean)
		u.wantHolder(l.Sandbox, "", false)
		u.wantHolds(map[string]int{})
		if ids := live(rt); len(ids) != 0 {
			t.Errorf("released clean=%v: sandboxes left %v", clean, ids)
		}
	}
	if _, err := acq.Acquire(t.Context(), fleet.Claim{Tier: runtime.TierGVisor, Image: image("a")}); err == nil {
		t.Error("a fresh lease on a tier without a runtime")
	}
	if n := rt.Created(); n != 2 {
		t.Errorf("%d sandboxes created, want 2", n)
	}
}

// fill leaves a file in each place a reset empties, and returns their
// host paths.
func fill(t *testing.T, sb runtime.Sandbox) []string {
	t.Helper()
	root := filepath.Dir(sb.(*fake.Sandbox).WorkspaceDir())
	var paths []string
	for _, p := range []string{"workspace/left", "tmp/left", "dev/shm/left"} {
		p = filepath.Join(root, p)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// ops records the operations of rt's sandboxes, failing those fail names.
func ops(rt *fake.Runtime, fail map[string]error) func() []string {
	var mu sync.Mutex
	var seen []string
	rt.SetHook(func(c fake.Call) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, c.Op)
		return fail[c.Op]
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestReset: a reset kills what the last execution left running, empties
// /workspace, /tmp and /dev/shm, and clears the counters; the sandbox
// serves again.
func TestReset(t *testing.T) {
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	sb := u.create(runtime.TierContainer, image("a"), fleet.HolderPool)
	left := fill(t, sb)
	p, err := sb.Agent().Start(t.Context(), agent.StartRequest{Argv: []string{"sleep", "600"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace"}, &runtimetest.Output{})
	if err != nil {
		t.Fatal(err)
	}
	seen := ops(u.rts[runtime.TierContainer], nil)

	if err := fleet.Reset(t.Context(), sb, -1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if st, err := p.Wait(ctx); err != nil || st.Signal == 0 {
		t.Errorf("the process the execution left: %+v, %v; want killed", st, err)
	}
	for _, p := range left {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after a reset: %v", p, err)
		}
	}
	if got := seen(); !slices.Equal(got, []string{"stats", "reset-stats"}) {
		t.Errorf("the reset's runtime operations %v, want stats then reset-stats", got)
	}
	answers(t, sb)
}

// TestResetRefuses: a sandbox whose counters show a limit hit is tainted
// and left as it is (it will be destroyed); a counter, the agent or a
// zygote that fails the reset fails it.
func TestResetRefuses(t *testing.T) {
	broken := errors.New("cgroup gone")
	for _, tc := range []struct {
		name    string
		stats   runtime.Stats
		fail    map[string]error
		zygotes []uint32
		kill    bool
		want    error
		// emptied: the agent's reset ran (the files are gone); cleared:
		// the counters' reset was asked for.
		emptied, cleared bool
	}{
		{name: "oom", stats: runtime.Stats{OOMKills: 1}, want: fleet.ErrTainted},
		{name: "pids", stats: runtime.Stats{PidsLimitHits: 3}, want: fleet.ErrTainted},
		{name: "disk", stats: runtime.Stats{DiskFull: true}, want: fleet.ErrTainted},
		{name: "stats", fail: map[string]error{"stats": broken}, want: broken},
		{name: "zygote gone", zygotes: []uint32{4242}, want: agent.KindZygote, emptied: true},
		{name: "agent gone", kill: true, want: agent.ErrLost},
		{name: "reset-stats", fail: map[string]error{"reset-stats": broken}, want: broken, emptied: true, cleared: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnit(t, fleet.Config{}, runtime.TierContainer)
			sb := u.create(runtime.TierContainer, image("a"), fleet.HolderPool)
			sb.(*fake.Sandbox).SetStats(tc.stats)
			left := fill(t, sb)
			if tc.kill {
				if err := sb.Kill(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			seen := ops(u.rts[runtime.TierContainer], tc.fail)
			err := fleet.Reset(t.Context(), sb, -1, tc.zygotes...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Reset = %v, want %v", err, tc.want)
			}
			if tc.want != fleet.ErrTainted && errors.Is(err, fleet.ErrTainted) {
				t.Errorf("Reset = %v: tainted, by no counter", err)
			}
			_, statErr := os.Stat(left[0])
			if gone := errors.Is(statErr, os.ErrNotExist); gone != tc.emptied {
				t.Errorf("files emptied %v, want %v", gone, tc.emptied)
			}
			wantOps := []string{"stats"}
			if tc.cleared {
				wantOps = append(wantOps, "reset-stats")
			}
			if got := seen(); !slices.Equal(got, wantOps) {
				t.Errorf("runtime operations %v, want %v", got, wantOps)
			}
			if st, _ := sb.Stats(t.Context()); tc.stats != (runtime.Stats{}) && st != tc.stats {
				t.Errorf("counters after a refused reset %+v, want them kept (%+v)", st, tc.stats)
			}
		})
	}
}
