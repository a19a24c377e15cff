package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// auditConc is the concurrency of the audit rows: enough executions at
// once that the trail's writes would show if they were in the way.
const auditConc = 8

// BenchmarkAudit (docs/bench.md, "Audit trail"; issue 29): executions per
// second on a warm container pool with the audit trail on (corral serve's
// default) ÷ the same with [audit] enabled = false, two servers measured
// in pairs of rounds of the same size, each pair in the other order than
// the one before, so that neither gets the quieter machine; the figure is
// the median of the pairs' ratios (a burst of the machine's other work
// moves one pair, not the figure). The target is ≥ 0.95. The on server's trail is then checked to
// hold a submit event for every execution it ran (a trail that dropped
// them would make the ratio meaningless).
func BenchmarkAudit(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.Runtime(b, "runc")
	testenv.Corral(b)
	pool := warmPool{image: images.HostName, tier: "container", minIdle: auditConc, maxIdle: 2 * auditConc}
	on, err := startServerWith(b, "audit-on", "", pool)
	if err != nil {
		b.Fatal(err)
	}
	off, err := startServerWith(b, "audit-off", "\n[audit]\nenabled = false\n", pool)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	req := sandbox.ExecuteRequest{Language: "bash", Code: "echo audited", Isolation: sandbox.IsolationContainer}
	// round runs n executions on s at auditConc and returns how long they
	// took.
	round := func(s *server, n int) (time.Duration, error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, auditConc)
		t0 := time.Now()
		for range auditConc {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if err := s.execute(ctx, req, "audited\n"); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return time.Since(t0), <-errs
	}
	// Warm both: pools filled, connections open, caches hot.
	for _, s := range []*server{off, on} {
		if _, err := round(s, 4*auditConc); err != nil {
			b.Fatal(err)
		}
	}
	const per = 8 * auditConc
	var tOn, tOff time.Duration
	var nOn, nOff int
	var ratios []float64
	i := 0
	for b.Loop() {
		// Two pairs an iteration, in both orders.
		for range 2 {
			pair := []*server{off, on}
			if i%2 == 1 {
				pair = []*server{on, off}
			}
			i++
			var dOn, dOff time.Duration
			for _, s := range pair {
				d, err := round(s, per)
				if err != nil {
					b.Fatal(err)
				}
				if s == on {
					dOn = d
				} else {
					dOff = d
				}
			}
			tOn, nOn, tOff, nOff = tOn+dOn, nOn+per, tOff+dOff, nOff+per
			ratios = append(ratios, dOff.Seconds()/dOn.Seconds())
		}
	}
	tputOn, tputOff := float64(nOn)/tOn.Seconds(), float64(nOff)/tOff.Seconds()
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	// The trail is written in batches after the answers: its last batch
	// may be a flush away.
	want, submits := nOn+4*auditConc, 0
	for deadline := time.Now().Add(10 * time.Second); submits < want && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if submits, err = countSubmits(ctx, on); err != nil {
			b.Fatal(err)
		}
	}
	if submits < want {
		b.Fatalf("the audit trail holds %d submit events; the server ran %d executions", submits, want)
	}
	b.Logf("audit trail: on %.1f exec/s, off %.1f exec/s at %d (%d executions each, %d pairs of rounds); "+
		"on ÷ off: median of the pairs %.3f (target ≥ 0.95), of the totals %.3f, pairs from %.3f to %.3f",
		tputOn, tputOff, auditConc, nOn, len(ratios), median, tputOn/tputOff, ratios[0], ratios[len(ratios)-1])
	b.ReportMetric(median, "audit-on/off-tput@8")
	b.ReportMetric(0, "ns/op")
}

// countSubmits counts the execution.submit events of the bench tenant.
func countSubmits(ctx context.Context, s *server) (int, error) {
	n, cursor := 0, ""
	for {
		path := "/v1/audit?limit=1000&action=" + audit.ExecutionSubmit
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		status, raw, err := s.call(ctx, http.MethodGet, path, nil)
		if err != nil {
			return 0, err
		}
		if status != http.StatusOK {
			return 0, fmt.Errorf("GET /v1/audit: %d: %.300s", status, raw)
		}
		var p sandbox.AuditPage
		if err := json.Unmarshal(raw, &p); err != nil {
			return 0, err
		}
		n += len(p.Events)
		if p.NextCursor == "" {
			return n, nil
		}
		cursor = p.NextCursor
	}
}
