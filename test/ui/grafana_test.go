package ui

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/testenv"
)

// TestGrafanaDashboard holds deploy/grafana/corral.json to the metrics
// internal/metrics defines: every query names only metrics that exist
// (with the _bucket/_sum/_count series of histograms), every corral_
// metric is on the dashboard, and the layout is well formed.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "deploy", "grafana", "corral.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct{ H, W, X, Y int }
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("corral.json: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) < 10 {
		t.Fatalf("corral.json: uid %q, %d panels", dash.UID, len(dash.Panels))
	}

	// The metric names and kinds, from the collectors themselves.
	kinds := map[string]string{} // name → counter, gauge, histogram
	m := metrics.New()
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]
			if !strings.HasPrefix(name, "corral_") {
				continue // the Go and process collectors, not ours to chart
			}
			switch v.Field(i).Interface().(type) {
			case prometheus.Histogram, *prometheus.HistogramVec:
				kinds[name] = "histogram"
			default:
				kinds[name] = "other"
			}
		}
	}
	if len(kinds) < 10 {
		t.Fatalf("found only %d metrics in internal/metrics: %v", len(kinds), kinds)
	}

	used := map[string]bool{}
	ids := map[int]string{}
	metric := regexp.MustCompile(`\bcorral_[a-z_]+`)
	for _, p := range dash.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
				t.Errorf("panel %q: unbalanced query %q", p.Title, tg.Expr)
			}
			for _, name := range metric.FindAllString(tg.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && kinds[b] == "histogram" {
						base = b
					}
				}
				if _, ok := kinds[base]; !ok {
					t.Errorf("panel %q queries %s, which internal/metrics does not define", p.Title, name)
				}
				if kinds[base] == "histogram" && base == name {
					t.Errorf("panel %q queries histogram %s without _bucket, _sum or _count", p.Title, name)
				}
				used[base] = true
			}
		}
	}
	var missing []string
	for name := range kinds {
		if !used[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("metrics not on the Grafana dashboard: %v", missing)
	}
}
