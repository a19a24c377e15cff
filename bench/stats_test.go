package bench

import (
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	s := &series{}
	for i := 100; i >= 1; i-- {
		s.add(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.95, 95 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := s.quantile(c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	s.wall = 2 * time.Second
	if got := s.throughput(); got != 50 {
		t.Errorf("throughput = %v, want 50", got)
	}
	if got := (&series{}).quantile(0.5); got != 0 {
		t.Errorf("empty quantile = %v", got)
	}
}

func TestParseMetrics(t *testing.T) {
	const text = `# HELP corral_pool_idle Ready sandboxes in the warm pool.
# TYPE corral_pool_idle gauge
corral_pool_idle{image="host",tier="container"} 4
corral_pool_idle{image="python",tier="container"} 3
corral_pool_idle{image="host",tier="gvisor"} 2
corral_pool_idle_extra{image="host",tier="gvisor"} 99
corral_pool_claims_total{image="a,b\"c",result="hit",tier="gvisor"} 7
corral_pool_claims_total{image="host",result="miss",tier="gvisor"} 1.5e+01
`
	idle, err := parseMetrics(strings.NewReader(text), "corral_pool_idle")
	if err != nil {
		t.Fatal(err)
	}
	if len(idle) != 3 {
		t.Fatalf("%d samples, want 3: %v", len(idle), idle)
	}
	if got := sum(idle, map[string]string{"tier": "container"}); got != 7 {
		t.Errorf("container idle = %v, want 7", got)
	}
	if got := sum(idle, map[string]string{"tier": "gvisor", "image": "host"}); got != 2 {
		t.Errorf("gvisor host idle = %v, want 2", got)
	}
	claims, err := parseMetrics(strings.NewReader(text), "corral_pool_claims_total")
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(claims, map[string]string{"image": `a,b"c`, "result": "hit"}); got != 7 {
		t.Errorf("quoted label: %v, want 7 (%v)", got, claims)
	}
	if got := sum(claims, map[string]string{"result": "miss"}); got != 15 {
		t.Errorf("miss = %v, want 15", got)
	}
	if _, err := parseMetrics(strings.NewReader(`corral_pool_idle{tier="x" 1`), "corral_pool_idle"); err == nil {
		t.Error("unterminated labels parsed")
	}
}
