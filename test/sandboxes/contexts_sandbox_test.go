package sandboxes

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestContexts: code contexts of a python sandbox on runc, through the Go
// SDK and over HTTP: state kept between runs, a second context apart, a
// fork that diverges, rich results (a DataFrame's HTML, a figure's PNG),
// an exception's parts, output streamed before the cell ends, interrupt,
// restart and delete.
func TestContexts(t *testing.T) {
	testenv.RequireRoot(t)
	// The python image has pandas and matplotlib; the host image has not.
	testenv.PythonImage(t)
	s := testserver.Start(t, testserver.Options{NoPool: true, Extra: []string{"--image-dir", testenv.ImageDir()}})
	c := client(s)
	ctx := t.Context()
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Image: "python", Tier: sandbox.IsolationContainer,
		TimeoutSeconds: 600, Metadata: map[string]string{"test": "contexts"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	run := func(cid, code string) *sandbox.Execution {
		t.Helper()
		ex, err := sb.RunCode(ctx, cid, code, sandbox.RunCodeOptions{Timeout: time.Minute})
		if err != nil {
			t.Fatalf("run %q: %v", code, err)
		}
		return ex
	}

	a, err := sb.CreateContext(ctx, sandbox.ContextRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Language != "python" || a.Cwd != "/workspace" {
		t.Errorf("context %+v", a)
	}
	run(a.ID, "x = 21")
	if ex := run(a.ID, "x * 2"); ex.Text() != "42" || ex.Error != nil {
		t.Errorf("x * 2: %+v, want 42", ex)
	}
	// State holds over 100 runs through HTTP.
	run(a.ID, "n = 0\ndef bump(k):\n    global n\n    n += k\n    return n")
	for i := range 100 {
		if ex := run(a.ID, fmt.Sprintf("bump(%d)", i)); ex.Error != nil {
			t.Fatalf("run %d: %+v", i, ex.Error)
		}
	}
	if ex := run(a.ID, "n, x"); ex.Text() != "(4950, 21)" {
		t.Errorf("after 100 runs: %q, want (4950, 21)", ex.Text())
	}
	b, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if ex := run(b.ID, "x"); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("x in a second context: %+v, want a NameError", ex)
	}
	f, err := sb.ForkContext(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ex := run(f.ID, "x"); ex.Text() != "21" {
		t.Errorf("x in the fork: %q, want 21", ex.Text())
	}
	run(f.ID, "x = -1")
	run(a.ID, "x += 1")
	if ea, ef := run(a.ID, "x"), run(f.ID, "x"); ea.Text() != "22" || ef.Text() != "-1" {
		t.Errorf("after diverging: original %q, fork %q; want 22, -1", ea.Text(), ef.Text())
	}

	ex := run(a.ID, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
	if len(ex.Results) != 1 || !strings.Contains(ex.Results[0].Data["text/html"], "<table") {
		t.Errorf("DataFrame: %+v, want text/html with a table", ex)
	}
	ex = run(a.ID, "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()")
	if len(ex.Results) != 1 {
		t.Fatalf("plt.show(): %+v, want one result", ex)
	}
	raw, err := base64.StdEncoding.DecodeString(ex.Results[0].Data["image/png"])
	if err != nil {
		t.Fatalf("image/png: %v", err)
	}
	if img, err := png.Decode(bytes.NewReader(raw)); err != nil || img.Bounds().Dx() < 100 {
		t.Errorf("the figure's PNG: %v", err)
	}
	ex = run(a.ID, "def f():\n    raise ValueError('bad value')\nf()")
	if e := ex.Error; e == nil || e.Name != "ValueError" || e.Value != "bad value" ||
		!strings.Contains(strings.Join(e.Traceback, ""), "raise ValueError('bad value')") {
		t.Errorf("exception: %+v", ex.Error)
	}

	// The first line arrives over SSE while the cell still sleeps.
	start := time.Now()
	var first, end time.Duration
	var lines []string
	for ev, err := range sb.RunCodeEvents(ctx, a.ID, "import time\nprint('one', flush=True)\ntime.sleep(2)\nprint('two')", time.Minute) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case sandbox.ContextEventStdout:
			if first == 0 {
				first = time.Since(start)
			}
			lines = append(lines, ev.Text)
		case sandbox.ContextEventEndOfExecution:
			end = time.Since(start)
		}
	}
	if strings.Join(lines, "") != "one\ntwo\n" || first == 0 || end-first < 1500*time.Millisecond {
		t.Errorf("streamed %q: first line after %v, end after %v; want the first 2 s before the end", lines, first, end)
	}
	t.Logf("streaming: first line after %v, end after %v", first, end)

	// Over HTTP, one JSON answer with every event.
	evs := runJSON(t, s, sb.ID, a.ID, "print('hi')\n6 * 7")
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, " "); got != "number_of_executions stdout result end_of_execution" || evs[1].Text != "hi\n" || evs[2].Data["text/plain"] != "42" {
		t.Errorf("events as JSON: %s %+v", got, evs)
	}

	// Interrupt a cell that would sleep for a minute.
	done := make(chan *sandbox.Execution, 1)
	go func() {
		ex, _ := sb.RunCode(ctx, b.ID, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", sandbox.RunCodeOptions{})
		done <- ex
	}()
	deadline := time.Now().Add(30 * time.Second)
	interrupted := false
	for !interrupted && time.Now().Before(deadline) {
		if err := sb.InterruptContext(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case ex := <-done:
			interrupted = true
			if ex == nil || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
				t.Errorf("interrupted: %+v, want a KeyboardInterrupt", ex)
			}
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !interrupted {
		t.Fatal("the cell did not end within 30 s of interrupts")
	}

	if err := sb.RestartContext(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if ex := run(a.ID, "x"); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("x after a restart: %+v, want a NameError", ex)
	}
	list, err := sb.Contexts(ctx)
	if err != nil || len(list) != 3 || list[0].ID != a.ID || list[1].ID != b.ID || list[2].ID != f.ID {
		t.Errorf("contexts %+v %v, want %s %s %s", list, err, a.ID, b.ID, f.ID)
	}
	if err := sb.DeleteContext(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.RunCode(ctx, f.ID, "1", sandbox.RunCodeOptions{}); !isStatus(err, http.StatusNotFound) {
		t.Errorf("run in a deleted context: %v, want 404", err)
	}
	if _, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "cobol"}); !isStatus(err, http.StatusBadRequest) {
		t.Errorf("a language without contexts: %v, want 400", err)
	}
}

func isStatus(err error, status int) bool {
	var ae *sandbox.APIError
	return errors.As(err, &ae) && ae.Status == status
}

// runJSON runs code over HTTP asking for one JSON answer.
func runJSON(t *testing.T, s *testserver.Server, id, cid, code string) []sandbox.ContextEvent {
	t.Helper()
	body, _ := json.Marshal(sandbox.RunCodeRequest{Code: code, TimeoutSeconds: 60})
	req, err := http.NewRequest("POST", s.URL+"/v1/sandboxes/"+id+"/contexts/"+cid+"/run", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testserver.AlphaKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("run as JSON: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out sandbox.ContextEventList
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Events
}
