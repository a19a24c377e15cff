package live

import (
	"context"
	"math"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

// Metrics: the node reads every running live sandbox's usage
// (runtime.Meter: its cgroup and its disk) every Config.MetricsEvery and
// keeps each one's last Config.MetricsKept readings in memory, with the
// sandbox's handle: they go with it, and a restart of the node starts
// them over. A reading's CPU is the share of the sandbox's cores it used
// since the reading before, so the first reading of a runtime sandbox (a
// new one, or one made again, restored or resumed) is only a baseline. A
// sandbox asked for its readings before it has one is read then, over a
// short window.

// Defaults of the readings.
const (
	DefaultMetricsEvery = 5 * time.Second
	DefaultMetricsKept  = 720 // an hour at DefaultMetricsEvery
)

// cpuWindow is the window of a reading made on demand without a baseline.
const cpuWindow = 250 * time.Millisecond

// meter holds a sandbox's readings.
type meter struct {
	mu sync.Mutex
	// ring holds the readings, oldest at next once it is full.
	ring []sandbox.SandboxMetric
	next int
	// base is the last reading of runtime sandbox baseOf: the start of the
	// next reading's CPU window.
	baseOf string
	baseAt time.Time
	base   int64 // CPU nanoseconds
}

// add records a reading u of runtime sandbox id at t, keeping at most
// kept; the first of a runtime sandbox only sets the baseline. It reports
// whether it recorded a reading.
func (m *meter) add(id string, t time.Time, u runtime.Usage, cores float64, kept int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	baseOf, baseAt, base := m.baseOf, m.baseAt, m.base
	m.baseOf, m.baseAt, m.base = id, t, u.CPUNanos
	wall := t.Sub(baseAt)
	if baseOf != id || wall <= 0 {
		return false
	}
	pct := float64(u.CPUNanos-base) / (float64(wall) * cores) * 100
	r := sandbox.SandboxMetric{Timestamp: t.UTC(), CPUCores: cores,
		CPUUsedPct:      math.Round(min(max(pct, 0), 100)*100) / 100,
		MemoryUsedBytes: u.MemoryBytes, MemoryCacheBytes: u.CacheBytes, MemoryLimitBytes: u.MemoryLimitBytes,
		DiskUsedBytes: u.DiskBytes, DiskLimitBytes: u.DiskLimitBytes}
	if len(m.ring) < kept {
		m.ring = append(m.ring, r)
		return true
	}
	m.ring[m.next] = r
	m.next = (m.next + 1) % len(m.ring)
	return true
}

// between returns the readings at or after since and before until (zero:
// no bound), oldest first.
func (m *meter) between(since, until time.Time) []sandbox.SandboxMetric {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []sandbox.SandboxMetric{}
	for i := range m.ring {
		r := m.ring[(m.next+i)%len(m.ring)]
		if (since.IsZero() || !r.Timestamp.Before(since)) && (until.IsZero() || r.Timestamp.Before(until)) {
			out = append(out, r)
		}
	}
	return out
}

func (m *meter) empty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ring) == 0
}

func (m *Manager) metricsEvery() time.Duration {
	if m.cfg.MetricsEvery > 0 {
		return m.cfg.MetricsEvery
	}
	return DefaultMetricsEvery
}

func (m *Manager) metricsKept() int {
	if m.cfg.MetricsKept > 0 {
		return m.cfg.MetricsKept
	}
	return DefaultMetricsKept
}

// Sample reads every running live sandbox of this node every
// Config.MetricsEvery until ctx ends.
func (m *Manager) Sample(ctx context.Context) {
	tick := time.NewTicker(m.metricsEvery())
	defer tick.Stop()
	for {
		for _, w := range m.table.All() {
			if s, ok := m.table.State(w).Occupant.(*Sandbox); ok {
				_, _ = s.sample(ctx, false)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample reads the sandbox's usage, if it runs: read reports whether it
// was read, recorded whether that made a reading (not only a baseline). A
// sandbox being made or torn down is skipped unless wait.
func (s *Sandbox) sample(ctx context.Context, wait bool) (read, recorded bool) {
	if wait {
		s.mu.Lock()
	} else if !s.mu.TryLock() {
		return false, false
	}
	defer s.mu.Unlock()
	sb := s.sb
	if sb == nil {
		return false, false // paused, or not made again yet
	}
	select {
	case <-sb.Agent().Done():
		return false, false // dead: made again on its next use
	default:
	}
	meter, ok := sb.(runtime.Meter)
	if !ok {
		return false, false
	}
	u, err := meter.Usage(ctx)
	if err != nil {
		s.m.log.Debug("read a sandbox's usage", "sandbox", s.w.Key(), "err", err)
		return false, false
	}
	return true, s.meter.add(sb.ID(), time.Now(), u, s.cores(), s.m.metricsKept())
}

// cores is the CPU the sandbox may use: its limit, or the host's.
func (s *Sandbox) cores() float64 {
	s.m.mu.Lock()
	l := s.spec.Request.Limits
	s.m.mu.Unlock()
	if l.CPUCores > 0 {
		return l.CPUCores
	}
	if l.CPUs > 0 {
		return l.CPUs
	}
	return float64(goruntime.NumCPU())
}

// Metrics returns the sandbox's readings at or after since and before
// until (zero: no bound), oldest first. A running sandbox with none yet is read now (which
// takes a quarter of a second), so a new sandbox answers one.
func (s *Sandbox) Metrics(ctx context.Context, since, until time.Time) ([]sandbox.SandboxMetric, error) {
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return nil, err
	}
	if s.meter.empty() {
		if read, recorded := s.sample(ctx, true); read && !recorded {
			// A baseline only: read again at the end of a short window.
			t := time.NewTimer(cpuWindow)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
			_, _ = s.sample(ctx, true)
		}
	}
	return s.meter.between(since, until), nil
}
