package ui

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/test/testserver"
)

// sandboxInfo is the part of GET /v1/sandboxes/{id} the test reads.
type sandboxInfo struct {
	SandboxID string            `json:"sandbox_id"`
	Metadata  map[string]string `json:"metadata"`
}

// processInfo is the part of a process's description the test reads.
type processInfo struct {
	PID     int  `json:"pid"`
	Running bool `json:"running"`
	Exit    *struct {
		ExitCode int `json:"exit_code"`
	} `json:"exit"`
}

func createSandbox(t *testing.T, srv *testserver.Server, key string, md map[string]string) string {
	t.Helper()
	var info sandboxInfo
	if status, raw := srv.Call(key, http.MethodPost, "/v1/sandboxes", map[string]any{"language": "python",
		"timeout_seconds": 600, "metadata": md}, &info); status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("create a sandbox: %d %s", status, raw)
	}
	t.Cleanup(func() { srv.Call(key, http.MethodDelete, "/v1/sandboxes/"+info.SandboxID, nil, nil) })
	return info.SandboxID
}

func startProcess(t *testing.T, srv *testserver.Server, key, sb string, req map[string]any) int {
	t.Helper()
	var p processInfo
	if status, raw := srv.Call(key, http.MethodPost, "/v1/sandboxes/"+sb+"/processes", req, &p); status != http.StatusCreated {
		t.Fatalf("start %v: %d %s", req, status, raw)
	}
	return p.PID
}

// TestSandboxesView creates live sandboxes through the API (two of tenant
// alpha, one of beta), starts a background process and one that exits in
// one of them, and checks in the dashboard: the list shows alpha's
// sandboxes only, with their metadata as text; the metadata filter narrows
// it; the sandbox's page lists both processes; Kill asks first, and kills
// only once confirmed.
func TestSandboxesView(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	b := newBrowser(t)
	shots := artifactDir(t)

	const hostileMeta = "<b>x</b><img src=x onerror=alert(3)>"
	sb := createSandbox(t, srv, testserver.AlphaKey, map[string]string{"project": "ui-demo", "owner": hostileMeta})
	other := createSandbox(t, srv, testserver.AlphaKey, map[string]string{"project": "other"})
	beta := createSandbox(t, srv, testserver.BetaKey, map[string]string{"project": "ui-demo"})

	web := startProcess(t, srv, testserver.AlphaKey, sb, map[string]any{"cmd": []string{"sleep", "600"}, "tag": "web"})
	done := startProcess(t, srv, testserver.AlphaKey, sb, map[string]any{"shell": "exit 7", "tag": "quick"})
	var ended processInfo
	if status, raw := srv.Call(testserver.AlphaKey, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/processes/%d?wait=true", sb, done), nil, &ended); status != http.StatusOK || ended.Running || ended.Exit == nil || ended.Exit.ExitCode != 7 {
		t.Fatalf("the quick process: %d %s", status, raw)
	}
	// The audit trail is written a fraction of a second after the calls.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var page struct {
			Events []struct{} `json:"events"`
		}
		srv.Call(testserver.AlphaKey, http.MethodGet, "/v1/audit?action=process.end&sandbox_id="+sb, nil, &page)
		if len(page.Events) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the quick process's end is not in the audit trail")
		}
	}

	b.signIn(srv.URL, testserver.AlphaKey, "")
	b.do("open the sandboxes", chromedp.Click(chromedp.CSS("#nav-sandboxes")))
	rowIDs := `Array.from(document.querySelectorAll("#sb-table tbody tr")).map(r => r.dataset.id).sort().join(",")`
	all := []string{sb, other}
	slices.Sort(all)
	b.waitFor("alpha's sandboxes", rowIDs+` === `+jsString(strings.Join(all, ",")))
	if s := b.text("#sb-table tbody"); strings.Contains(s, beta) {
		t.Errorf("tenant beta's sandbox %s is listed for alpha", beta)
	}
	row := `#sb-table tr[data-id="` + sb + `"]`
	for sel, want := range map[string]string{row + ` .metadata [data-key="project"]`: "project=ui-demo",
		row + ` .metadata [data-key="owner"]`: "owner=" + hostileMeta, row + " .badge": "running"} {
		if got := b.text(sel); got != want {
			t.Errorf("%s = %q, want %q", sel, got, want)
		}
	}
	var markup int
	b.eval(`document.querySelectorAll("#sb-table tbody b, #sb-table tbody img").length`, &markup)
	if markup != 0 {
		t.Errorf("metadata became markup: %d elements", markup)
	}
	if exp := b.text(row + " .expires"); !strings.HasSuffix(exp, "s") && !strings.HasSuffix(exp, "m") {
		t.Errorf("expires in %q", exp)
	}

	// The metadata filter: a pair no sandbox holds, then two pairs (one
	// value with spaces and markup) that only sb holds.
	b.do("filter by a missing pair",
		chromedp.SendKeys(chromedp.CSS("#sb-metadata"), "project=nothing"),
		chromedp.Click(chromedp.CSS("#sb-apply")))
	b.waitFor("the empty list", `location.hash.includes("metadata.project=nothing") && `+rowIDs+` === "" && !document.querySelector("#sb-empty").hidden`)
	b.do("clear the filter", chromedp.Click(chromedp.CSS("#sb-clear")))
	b.waitFor("the whole list again", `location.hash === "#/sandboxes" && `+rowIDs+` === `+jsString(strings.Join(all, ",")))
	b.do("filter by metadata",
		chromedp.SendKeys(chromedp.CSS("#sb-metadata"), "project=ui-demo, owner="+hostileMeta),
		chromedp.Click(chromedp.CSS("#sb-apply")))
	b.waitFor("the filtered list", `location.hash.includes("metadata.project=ui-demo") && location.hash.includes("metadata.owner=") && `+
		rowIDs+` === `+jsString(sb))
	b.screenshot(shots, "sandboxes")

	// The sandbox's processes.
	b.do("open the sandbox", chromedp.Click(chromedp.CSS(row+" a.sb-link")))
	procRow := func(pid int) string { return fmt.Sprintf(`#sb-procs tr[data-pid="%d"]`, pid) }
	b.waitFor("the processes", `document.querySelector("#sb-id").textContent === `+jsString(sb)+
		` && document.querySelector(`+jsString(procRow(web))+`) !== null && document.querySelector(`+jsString(procRow(done))+`) !== null`)
	if got := b.text(procRow(web)); !strings.Contains(got, "web") || !strings.Contains(got, "sleep 600") || !strings.Contains(got, "running") {
		t.Errorf("the background process's row: %q", got)
	}
	if got := b.text(procRow(done) + " .badge"); !strings.HasPrefix(got, "exit 7") {
		t.Errorf("the ended process's state: %q", got)
	}
	if got := b.text("#sb-meta"); !strings.Contains(got, "owner="+hostileMeta) || !strings.Contains(got, "project=ui-demo") {
		t.Errorf("the sandbox's metadata: %q", got)
	}
	// Its audit trail: the create, the processes' starts with their argv
	// and the quick one's end, as text.
	b.waitFor("the audit trail", `document.querySelectorAll("#sb-audit tbody tr").length >= 4`)
	if got := b.text("#sb-audit tbody"); !strings.Contains(got, "sandbox.create") || !strings.Contains(got, `["sleep","600"]`) ||
		!strings.Contains(got, "process.end") || !strings.Contains(got, "exit_code=7") {
		t.Errorf("the sandbox's audit trail: %q", got)
	}
	b.screenshot(shots, "sandbox")

	// Kill asks first; "Keep it" keeps it.
	b.do("kill, then keep", chromedp.Click(chromedp.CSS("#sb-kill")))
	b.waitFor("the question", `!document.querySelector("#sb-confirm").hidden`)
	b.do("keep it", chromedp.Click(chromedp.CSS("#sb-kill-no")))
	b.waitFor("the question gone", `document.querySelector("#sb-confirm").hidden`)
	if status, raw := srv.Call(testserver.AlphaKey, http.MethodGet, "/v1/sandboxes/"+sb, nil, nil); status != http.StatusOK {
		t.Fatalf("the sandbox after Keep: %d %s", status, raw)
	}
	b.do("kill it",
		chromedp.Click(chromedp.CSS("#sb-kill")),
		chromedp.Click(chromedp.CSS("#sb-kill-yes")))
	b.waitFor("the list without it", `location.hash === "#/sandboxes" && `+rowIDs+` === `+jsString(other))
	if status, raw := srv.Call(testserver.AlphaKey, http.MethodGet, "/v1/sandboxes/"+sb, nil, nil); status != http.StatusNotFound {
		t.Errorf("the killed sandbox: %d %s", status, raw)
	}
	if status, raw := srv.Call(testserver.BetaKey, http.MethodGet, "/v1/sandboxes/"+beta, nil, nil); status != http.StatusOK {
		t.Errorf("beta's sandbox after alpha's kill: %d %s", status, raw)
	}
	b.checkClean()
}
