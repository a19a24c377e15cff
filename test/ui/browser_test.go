package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/testenv"
)

// chromiumPath finds Debian's chromium (scripts/deps.sh installs it);
// without it the test skips, or fails under CORRAL_TEST_STRICT.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p := "/usr/bin/chromium"
	if _, err := os.Stat(p); err != nil {
		if lp, lerr := exec.LookPath("chromium"); lerr == nil {
			p, err = lp, nil
		}
		testenv.Need(t, err == nil, "chromium missing: run scripts/deps.sh (Debian package chromium)")
	}
	return p
}

// browser is one headless chromium tab, with what the page did that a
// test must see: JavaScript dialogs (alert, confirm, prompt), uncaught
// exceptions and security messages such as CSP or Trusted Types
// violations.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	dialogs    []string
	exceptions []string
	security   []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // we are root; the browser only loads our own test server
		chromedp.Headless,
		chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	handle := make(chan struct{}, 16)
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			b.dialogs = append(b.dialogs, fmt.Sprintf("%s: %q", ev.Type, ev.Message))
			select {
			case handle <- struct{}{}:
			default:
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			b.exceptions = append(b.exceptions, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *log.EventEntryAdded:
			if ev.Entry.Source == log.EntrySourceSecurity {
				b.security = append(b.security, ev.Entry.Text)
			}
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// A dialog blocks the page until it is answered; dismiss each one (it
	// has been recorded) so a failing run still ends.
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-handle:
				chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}
		}
	}()
	if _, err := chromedp.Call(ctx, log.Enable, struct{}{}); err != nil {
		t.Fatalf("enable the log domain: %v", err)
	}
	return b
}

// do runs actions, failing the test on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v%s", what, err, b.report())
	}
}

// eval evaluates expr in the page (through DevTools, so the page's CSP does
// not apply to the test's own probes) and decodes the result into out.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v%s", expr, err, b.report())
	}
	if err := json.Unmarshal(raw, out); err != nil {
		b.t.Fatalf("evaluate %s: decode %s: %v", expr, raw, err)
	}
}

// waitFor evaluates expr until it is true. chromedp.Poll cannot be used:
// it builds its predicate with new Function inside the page, which the
// dashboard's CSP (no eval) refuses, as it should.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var ok bool
		b.eval("!!("+expr+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			b.eval(`document.body.innerText.slice(0, 3000)`, &body)
			b.t.Fatalf("waiting for %s (%s): gave up; page text:\n%s%s", what, expr, body, b.report())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// text is the textContent of the first element matching sel ("" if none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	var s string
	b.eval(fmt.Sprintf(`(document.querySelector(%s) || {}).textContent || ""`, jsString(sel)), &s)
	return s
}

// screenshot saves the whole page as name.png in dir.
func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s (%d bytes)", p, len(png))
}

// checkClean fails the test if the page opened a dialog, threw or broke
// its security policy.
func (b *browser) checkClean() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 {
		b.t.Errorf("JavaScript dialogs opened: %q", b.dialogs)
	}
	if len(b.exceptions) > 0 {
		b.t.Errorf("uncaught exceptions in the page: %q", b.exceptions)
	}
	if len(b.security) > 0 {
		b.t.Errorf("security messages (CSP, Trusted Types): %q", b.security)
	}
}

func (b *browser) report() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("\ndialogs: %q\nexceptions: %q\nsecurity: %q", b.dialogs, b.exceptions, b.security)
}

func jsString(s string) string {
	j, _ := json.Marshal(s)
	return string(j)
}

// artifactDir is where screenshots go: the test's artifact directory,
// kept with `go test -artifacts` (under -outputdir).
func artifactDir(t *testing.T) string {
	dir := t.ArtifactDir()
	t.Logf("screenshots in %s (kept with go test -artifacts)", dir)
	return dir
}

// signIn loads the dashboard and signs in with key, first trying a wrong
// key.
func (b *browser) signIn(url, key, shots string) {
	b.t.Helper()
	b.do("open the dashboard",
		chromedp.Navigate(url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#signin-key")),
	)
	if shots != "" {
		b.screenshot(shots, "1-signin")
	}
	b.do("sign in with a wrong key",
		chromedp.SendKeys(chromedp.CSS("#signin-key"), "not-a-key"),
		chromedp.Click(chromedp.CSS("#signin-submit")),
	)
	b.waitFor("the refusal", `document.querySelector("#signin-error").textContent.includes("not valid")`)
	b.do("sign in",
		chromedp.SendKeys(chromedp.CSS("#signin-key"), key),
		chromedp.Click(chromedp.CSS("#signin-submit")),
		chromedp.WaitVisible(chromedp.CSS("#view-overview")),
	)
}
