package live

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/sandbox"
)

// TestMeter pins how readings are made of usage: the first of a runtime
// sandbox is a baseline, the CPU is the share of the cores used since the
// reading before (bounded to 0..100), another runtime sandbox starts over,
// the ring keeps the latest, and between bounds by time, [since, until).
func TestMeter(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cpu := func(s float64) runtime.Usage {
		return runtime.Usage{CPUNanos: int64(s * float64(time.Second)), MemoryBytes: 1, CacheBytes: 2, MemoryLimitBytes: 3,
			DiskBytes: 4, DiskLimitBytes: 5}
	}
	var m meter
	const kept = 3
	if m.add("a", at(0), cpu(10), 2, kept) {
		t.Error("a first reading was recorded, not a baseline")
	}
	if got := m.between(time.Time{}, time.Time{}); len(got) != 0 {
		t.Errorf("readings after a baseline: %v", got)
	}
	for _, step := range []struct {
		id        string
		t, cpu    float64
		recorded  bool
		wantPct   float64
		wantCount int
	}{
		{"a", 5, 15, true, 50, 1},        // 5 s of 2 cores' 10
		{"a", 10, 25, true, 100, 2},      // 10 of 10
		{"a", 15, 45, true, 100, 3},      // above: bounded
		{"a", 20, 45, true, 0, 3},        // idle, the oldest dropped
		{"b", 25, 1, false, 0, 3},        // another sandbox: a baseline
		{"b", 26, 1.333, true, 16.65, 3}, // 0.333 s of 2 s
	} {
		if got := m.add(step.id, at(step.t), cpu(step.cpu), 2, kept); got != step.recorded {
			t.Fatalf("at %v s: recorded %v, want %v", step.t, got, step.recorded)
		}
		all := m.between(time.Time{}, time.Time{})
		if len(all) != step.wantCount {
			t.Fatalf("at %v s: %d readings, want %d", step.t, len(all), step.wantCount)
		}
		if last := all[len(all)-1]; step.recorded && last.CPUUsedPct != step.wantPct {
			t.Errorf("at %v s: cpu %v%%, want %v%%", step.t, last.CPUUsedPct, step.wantPct)
		}
	}
	all := m.between(time.Time{}, time.Time{})
	var times []time.Time
	for _, r := range all {
		times = append(times, r.Timestamp)
	}
	if diff := cmp.Diff([]time.Time{at(15), at(20), at(26)}, times); diff != "" {
		t.Errorf("kept readings (-want +got):\n%s", diff)
	}
	want := sandbox.SandboxMetric{Timestamp: at(26), CPUCores: 2, CPUUsedPct: 16.65, MemoryUsedBytes: 1, MemoryCacheBytes: 2,
		MemoryLimitBytes: 3, DiskUsedBytes: 4, DiskLimitBytes: 5}
	if diff := cmp.Diff(want, all[2]); diff != "" {
		t.Errorf("reading (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		since, until time.Time
		want         int
	}{
		{at(15), time.Time{}, 3}, {at(15.1), time.Time{}, 2}, {time.Time{}, at(20), 1}, {time.Time{}, at(20.1), 2},
		{at(20), at(20.1), 1}, {at(20), at(20), 0}, {at(21), at(25), 0}, {at(30), time.Time{}, 0},
	} {
		if got := m.between(c.since, c.until); len(got) != c.want {
			t.Errorf("between %v and %v: %d readings, want %d", c.since, c.until, len(got), c.want)
		}
	}
}

// TestMetrics reads live sandboxes on fake runtimes: a new sandbox answers
// one reading at once, made on demand, with its limits; the node's sampler
// then adds one per interval to the number kept; a file written shows on
// the disk, and what the runtime reads is what the readings say; a paused
// sandbox keeps its readings and adds none.
func TestMetrics(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.MetricsEvery, c.MetricsKept = 20*time.Millisecond, 4 })
	ctx := t.Context()
	if _, err := u.m.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: "box",
		Limits: sandbox.SandboxLimits{MemoryMB: 256, CPUCores: 0.5, DiskMB: 64}}); err != nil {
		t.Fatal(err)
	}
	s := u.handle("box")
	first, err := s.Metrics(ctx, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 {
		t.Fatalf("a new sandbox answered %d readings, want 1", len(first))
	}
	if r := first[0]; r.CPUCores != 0.5 || r.MemoryLimitBytes != 256<<20 || r.DiskLimitBytes != 64<<20 || time.Since(r.Timestamp) > time.Minute {
		t.Errorf("first reading %+v", r)
	}
	if _, err := u.m.WriteFile(ctx, "t", "box", "/workspace/big", strings.NewReader(strings.Repeat("x", 100000))); err != nil {
		t.Fatal(err)
	}

	sampling, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { u.live.Sample(sampling) })
	defer func() { stop(); wg.Wait() }()
	var got []sandbox.SandboxMetric
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got, err = s.Metrics(ctx, time.Time{}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if len(got) == 4 && !got[0].Timestamp.Equal(first[0].Timestamp) {
			break // the first one dropped: the ring is full and turned
		}
		if len(got) > 4 || time.Now().After(deadline) {
			t.Fatalf("%d readings, the first at %v (the on-demand one at %v); want the last 4", len(got), got[0].Timestamp, first[0].Timestamp)
		}
	}
	for i := 1; i < len(got); i++ {
		if !got[i].Timestamp.After(got[i-1].Timestamp) {
			t.Errorf("readings out of order: %v", got)
		}
	}
	if last := got[len(got)-1]; last.DiskUsedBytes < 100000 {
		t.Errorf("disk used %d after 100000 bytes written", last.DiskUsedBytes)
	}
	if since, err := s.Metrics(ctx, got[2].Timestamp, time.Time{}); err != nil || len(since) < 2 || since[0].Timestamp.Before(got[2].Timestamp) {
		t.Errorf("since the third: %v %v", since, err)
	}

	// What the runtime reads is what the readings say.
	s.mu.Lock()
	sb := s.sb
	s.mu.Unlock()
	fs, ok := sb.(*fake.Sandbox)
	if !ok {
		t.Fatalf("the sandbox runs on a %T", sb)
	}
	fs.SetUsage(runtime.Usage{MemoryBytes: 7 << 20, CacheBytes: 5, MemoryLimitBytes: 6, DiskBytes: 3, DiskLimitBytes: 4})
	want := sandbox.SandboxMetric{CPUCores: 0.5, MemoryUsedBytes: 7 << 20, MemoryCacheBytes: 5, MemoryLimitBytes: 6, DiskUsedBytes: 3, DiskLimitBytes: 4}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, err = s.Metrics(ctx, time.Time{}, time.Time{})
		last := got[len(got)-1]
		last.Timestamp = time.Time{}
		if err == nil && last == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last reading is %+v (%v), want %+v", last, err, want)
		}
	}

	if err := u.m.Pause(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	paused, _ := s.Metrics(ctx, time.Time{}, time.Time{})
	time.Sleep(100 * time.Millisecond)
	later, err := s.Metrics(ctx, time.Time{}, time.Time{})
	if err != nil || len(later) == 0 || !cmp.Equal(paused, later) {
		t.Errorf("a paused sandbox's readings changed or went: %v, then %v (%v)", paused, later, err)
	}
	if err := u.m.Delete(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Metrics(ctx, time.Time{}, time.Time{}); err == nil {
		t.Error("a killed sandbox answered readings")
	}
}
