// Package ui tests the dashboard (/ui/) in headless Debian chromium, driven
// with chromedp, against a real corral serve: sign-in with an API key,
// the executions list and its filters, an execution whose output is
// hostile HTML (shown as text, no dialog), live output, and an overview
// whose percentiles are checked against the records themselves; live
// sandboxes, their metadata filter, their processes and Kill.
package ui

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// hostile is the stdout of the execution the dashboard must show as text.
const hostile = `<script>alert(1)</script><img src=x onerror=alert(2)>`

// run executes code and waits for its record.
func run(t *testing.T, srv *testserver.Server, key, code string) sandbox.Result {
	t.Helper()
	r, err := execute(srv, key, code)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// execute is run for other goroutines than the test's.
func execute(srv *testserver.Server, key, code string) (sandbox.Result, error) {
	c := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: key, Timeout: 2 * time.Minute})
	r, err := c.Execute(context.Background(), sandbox.ExecuteRequest{Language: "python", Code: code})
	var e *sandbox.Error
	if errors.As(err, &e) && e.Result != nil {
		return *e.Result, nil // a failed execution is still a record
	}
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("run %q: %w", code, err)
	}
	return *r, nil
}

// list returns every execution of key's tenant that query matches, across
// pages.
func list(t *testing.T, srv *testserver.Server, key string, query url.Values) []sandbox.Result {
	t.Helper()
	var out []sandbox.Result
	query.Set("limit", "1000")
	for {
		var page struct {
			Executions []sandbox.Result `json:"executions"`
			NextCursor string           `json:"next_cursor"`
		}
		if status, raw := srv.Call(key, http.MethodGet, "/v1/executions?"+query.Encode(), nil, &page); status != http.StatusOK {
			t.Fatalf("list %v: %d %s", query, status, raw)
		}
		out = append(out, page.Executions...)
		if page.NextCursor == "" {
			return out
		}
		query.Set("cursor", page.NextCursor)
	}
}

func ids(rs []sandbox.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ExecutionID)
	}
	slices.Sort(out)
	return out
}

func TestDashboard(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	b := newBrowser(t)
	shots := artifactDir(t)

	xss := run(t, srv, testserver.AlphaKey, "import sys\nsys.stdout.write("+strconv.Quote(hostile)+")\nsys.exit(3)")
	if xss.Stdout != hostile || xss.ExitCode == nil || *xss.ExitCode != 3 {
		t.Fatalf("the hostile execution: stdout %q, exit %v", xss.Stdout, xss.ExitCode)
	}
	boom := run(t, srv, testserver.AlphaKey, `raise ValueError("boom")`)
	hello := run(t, srv, testserver.AlphaKey, `print("hello")`)
	big := run(t, srv, testserver.AlphaKey, "for i in range(30000):\n    print('line', i)")
	if !big.StdoutTruncated {
		t.Fatalf("the big execution kept all its output (%d bytes)", big.StdoutBytes)
	}
	other := run(t, srv, testserver.BetaKey, "import sys\nprint('beta')\nsys.exit(5)")

	// What the filter must show: the API's own answer, which is the
	// failing executions of tenant alpha and nothing else.
	want := ids(list(t, srv, testserver.AlphaKey, url.Values{"exit_code_ne": {"0"}}))
	if exp := ids([]sandbox.Result{xss, boom}); !slices.Equal(want, exp) {
		t.Fatalf("GET /v1/executions?exit_code_ne=0 = %v, want %v", want, exp)
	}

	b.signIn(srv.URL, testserver.AlphaKey, shots)

	// The list, then exit code ≠ 0.
	b.do("open the list", chromedp.Click(chromedp.CSS("#nav-executions")))
	all := ids([]sandbox.Result{xss, boom, hello, big})
	rowIDs := `Array.from(document.querySelectorAll("#exec-table tbody tr")).map(r => r.dataset.id).sort().join(",")`
	b.waitFor("every execution of alpha", rowIDs+` === `+jsString(strings.Join(all, ",")))
	b.do("filter exit code ≠ 0", chromedp.Click(chromedp.CSS("#f-exit")))
	b.waitFor("the filtered list", `location.hash.includes("exit_code_ne=0") && `+rowIDs+` === `+jsString(strings.Join(want, ",")))
	if s := b.text("#exec-table tbody"); strings.Contains(s, other.ExecutionID) {
		t.Errorf("tenant beta's execution %s is listed for alpha", other.ExecutionID)
	}
	b.screenshot(shots, "2-executions")

	// The hostile execution: its output is text.
	b.do("open the hostile execution", chromedp.Click(chromedp.CSS(`tr[data-id="`+xss.ExecutionID+`"] a.exec-link`)))
	b.waitFor("the execution page", `document.querySelector("#ex-id").textContent === `+jsString(xss.ExecutionID)+
		` && document.querySelector("#stdout pre") !== null`)
	if got := b.text("#stdout pre"); got != hostile {
		t.Errorf("stdout shown as %q, want the text %q", got, hostile)
	}
	var parsed struct {
		Imgs, Scripts, InStdout int
		Onerror                 bool
	}
	b.eval(`({imgs: document.querySelectorAll("img").length, scripts: document.querySelectorAll("script").length,
		inStdout: document.querySelectorAll("#stdout *").length,
		onerror: document.querySelector("[onerror]") !== null})`, &parsed)
	if parsed.Imgs != 0 || parsed.Scripts != 1 || parsed.InStdout != 1 || parsed.Onerror {
		t.Errorf("the output became markup: %+v (want no img, only app.js, one pre in #stdout)", parsed)
	}
	for sel, want := range map[string]string{"#ex-error-type": "runtime_error", "#ex-status": "failed",
		"#stdout-meta": fmt.Sprintf("%d B", len(hostile))} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s = %q, want it to contain %q", sel, got, want)
		}
	}
	b.screenshot(shots, "3-execution")

	// Head and tail of a long output, with the exact totals.
	b.eval(`location.hash = "#/executions/`+big.ExecutionID+`"; true`, new(bool))
	b.waitFor("the head and tail", `document.querySelector("#ex-id").textContent === `+jsString(big.ExecutionID)+
		` && document.querySelector("#stdout pre.tail") !== null`)
	if head, tail := b.text("#stdout pre.head"), b.text("#stdout pre.tail"); !strings.HasPrefix(head, "line 0\nline 1\n") || !strings.HasSuffix(tail, "line 29999\n") {
		t.Errorf("head %.40q… and tail …%q", head, tail[max(0, len(tail)-40):])
	}
	if meta := b.text("#stdout-meta"); !strings.Contains(meta, "30000 lines") {
		t.Errorf("stdout totals %q, want 30000 lines", meta)
	}
	if !strings.Contains(b.text("#stdout .omitted"), "bytes omitted") {
		t.Errorf("no omitted marker between head and tail")
	}

	// The overview counts alpha's four executions.
	b.do("open the overview", chromedp.Click(chromedp.CSS("#nav-overview")))
	b.waitFor("the overview", `document.querySelector("#ov-executions").textContent === "4"`)
	for sel, want := range map[string]string{"#ov-success": "50.0%", "#ov-finished": "4", "#ov-errors tbody": "runtime_error2"} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s = %q, want it to contain %q", sel, got, want)
		}
	}
	b.screenshot(shots, "4-overview")

	// Live output of a running execution, then a cancel from the page.
	var sub struct {
		ExecutionID string `json:"execution_id"`
	}
	if status, raw := srv.Call(testserver.AlphaKey, http.MethodPost, "/v1/executions", map[string]any{"language": "python",
		"code": "import time\nprint('live-1', flush=True)\ntime.sleep(25)\nprint('live-2')"}, &sub); status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", status, raw)
	}
	b.eval(`location.hash = "#/executions/`+sub.ExecutionID+`"; true`, new(bool))
	b.waitFor("live output", `!document.querySelector("#ex-live").hidden && document.querySelector("#stdout").textContent.includes("live-1")`)
	b.screenshot(shots, "5-live")
	b.do("cancel", chromedp.Click(chromedp.CSS("#ex-cancel")))
	b.waitFor("the cancelled record", `document.querySelector("#ex-status").textContent === "cancelled" && document.querySelector("#ex-live").hidden`)
	if s := b.text("#stdout"); !strings.Contains(s, "live-1") || strings.Contains(s, "live-2") {
		t.Errorf("stdout after cancel: %q", s)
	}

	b.checkClean()
}

// TestOverviewPercentiles checks the overview's P50/P95/P99 (latency and run
// time) against values this test computes itself from the records the API
// lists for the same window, by the definition docs/dashboard.md gives:
// nearest rank over the final executions created in [since, until), run
// time from duration_ms of those that ran (duration_ms > 0), latency
// finished_at − created_at in whole milliseconds (truncated). It also
// checks the counts against /metrics, which observes the same executions.
func TestOverviewPercentiles(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	b := newBrowser(t)

	// Executions of varied length, at once, so that some wait in the queue
	// and latencies spread; some fail after their sleep.
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code := fmt.Sprintf("import time\ntime.sleep(%.2f)\n", float64(i%8)*0.07)
			if i%5 == 0 {
				code += "raise SystemExit(2)\n"
			}
			if _, err := execute(srv, testserver.AlphaKey, code); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	b.signIn(srv.URL, testserver.AlphaKey, "")
	b.waitFor("the overview", `document.querySelector("#ov-executions").textContent === "`+strconv.Itoa(n)+`"`)
	b.screenshot(artifactDir(t), "overview")
	var shown struct {
		Since, Until string
		Lat, Dur     map[string]string
	}
	b.eval(`(() => {
		const ms = (p) => Object.fromEntries(["p50", "p95", "p99"].map(q => [q, document.getElementById(p + "-" + q).dataset.ms]));
		const r = document.getElementById("ov-range").dataset;
		return {since: r.since, until: r.until, lat: ms("ov-lat"), dur: ms("ov-dur")};
	})()`, &shown)

	since, err1 := time.Parse(time.RFC3339Nano, shown.Since)
	until, err2 := time.Parse(time.RFC3339Nano, shown.Until)
	if err1 != nil || err2 != nil {
		t.Fatalf("the overview's window %q – %q: %v %v", shown.Since, shown.Until, err1, err2)
	}
	recs := list(t, srv, testserver.AlphaKey, url.Values{"since": {shown.Since}, "until": {shown.Until}})
	if len(recs) != n {
		t.Fatalf("%d executions listed in [%s, %s), want %d", len(recs), since, until, n)
	}
	var durations, latencies []int64
	for _, r := range recs {
		if !r.Status.Final() {
			continue
		}
		if r.DurationMS > 0 {
			durations = append(durations, r.DurationMS)
		}
		if !r.FinishedAt.Before(r.CreatedAt) {
			latencies = append(latencies, r.FinishedAt.Sub(r.CreatedAt).Milliseconds())
		}
	}
	if len(durations) != n || len(latencies) != n {
		t.Fatalf("%d durations and %d latencies of %d executions", len(durations), len(latencies), n)
	}
	for _, c := range []struct {
		name  string
		vs    []int64
		shown map[string]string
	}{{"latency", latencies, shown.Lat}, {"run time", durations, shown.Dur}} {
		want := nearestRanks(c.vs)
		got := map[string]string{}
		for q, v := range want {
			got[q] = c.shown[q]
			if c.shown[q] != strconv.FormatInt(v, 10) {
				t.Errorf("%s %s: the overview shows %q ms, the records give %d ms", c.name, q, c.shown[q], v)
			}
		}
		t.Logf("%s over %d values: %v", c.name, len(c.vs), got)
	}
	if shown.Lat["p50"] == shown.Lat["p99"] && shown.Dur["p50"] == shown.Dur["p99"] {
		t.Errorf("no spread in the fixture: %+v", shown)
	}

	// /metrics counted the same executions (only alpha ran here).
	_, raw := srv.Call("", http.MethodGet, "/metrics", nil, nil)
	for metric, want := range map[string]int{"corral_executions_total": n,
		"corral_execution_latency_seconds_count": len(latencies), "corral_execution_duration_seconds_count": len(durations)} {
		if got := sumMetric(string(raw), metric); got != float64(want) {
			t.Errorf("/metrics %s = %v, want %d", metric, got, want)
		}
	}
	b.checkClean()
}

// nearestRanks is P50, P95 and P99 of vs by nearest rank: the value at
// 1-based rank ceil(p/100 × n) of the sorted values.
func nearestRanks(vs []int64) map[string]int64 {
	s := slices.Sorted(slices.Values(vs))
	at := func(p float64) int64 { return s[int(math.Ceil(p/100*float64(len(s))))-1] }
	return map[string]int64{"p50": at(50), "p95": at(95), "p99": at(99)}
}

// sumMetric adds up every sample of name in a Prometheus text exposition.
func sumMetric(text, name string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}
