//go:build linux

package kernel_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// The tests in this file drive contexts through a real agent in local mode
// (this test binary, started again as the agent), with the host's
// /usr/bin/python3: no root, no sandbox.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

const hostPython = "/usr/bin/python3"

// waitLimit bounds every wait in these tests, so a broken context fails
// the test instead of hanging it.
const waitLimit = 30 * time.Second

// localBox is a local agent and the contexts over it.
type localBox struct {
	k    *kernel.Contexts
	root string
}

func start(t testing.TB, o kernel.Options) *localBox {
	t.Helper()
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts' unit tests run it)")
	root := t.TempDir()
	for _, d := range []string{"workspace", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	l, err := agent.StartLocal(ctx, os.Args[0], root, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"}, o.Env...)
	k := kernel.New(l.Client, o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := k.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("agent exit: %v", err)
		}
	})
	return &localBox{k: k, root: root}
}

func (s *localBox) create(t testing.TB, o kernel.ContextOptions) string {
	t.Helper()
	if o.Language == "" {
		o.Language = "python"
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	info, err := s.k.Create(ctx, o)
	if err != nil {
		t.Fatalf("create %+v: %v", o, err)
	}
	return info.ID
}

// cell is what one run produced.
type cell struct {
	events []sandbox.ContextEvent
}

func (c cell) of(typ string) []sandbox.ContextEvent {
	var out []sandbox.ContextEvent
	for _, ev := range c.events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (c cell) stdout() string {
	var b strings.Builder
	for _, ev := range c.of(sandbox.ContextEventStdout) {
		b.WriteString(ev.Text)
	}
	return b.String()
}

// main returns the text/plain of the cell's main result, or "".
func (c cell) main() string {
	for _, ev := range c.of(sandbox.ContextEventResult) {
		if ev.IsMain {
			return ev.Data["text/plain"]
		}
	}
	return ""
}

func (c cell) err() *sandbox.ContextEvent {
	if evs := c.of(sandbox.ContextEventError); len(evs) > 0 {
		return &evs[0]
	}
	return nil
}

// run runs code in the context id and checks the events' frame: the
// execution count first, the end last.
func (s *localBox) run(t testing.TB, id, code string) cell {
	t.Helper()
	return s.runTimeout(t, id, code, 0)
}

func (s *localBox) runTimeout(t testing.TB, id, code string, timeout time.Duration) cell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var c cell
	if err := s.k.Run(ctx, id, code, timeout, func(ev sandbox.ContextEvent) { c.events = append(c.events, ev) }); err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	if n := len(c.events); n == 0 || c.events[n-1].Type != sandbox.ContextEventEndOfExecution {
		t.Fatalf("run %q: events %+v do not end with %s", code, c.events, sandbox.ContextEventEndOfExecution)
	}
	if len(c.of(sandbox.ContextEventEndOfExecution)) != 1 {
		t.Errorf("run %q: %d ends", code, len(c.of(sandbox.ContextEventEndOfExecution)))
	}
	return c
}

func TestStateKept(t *testing.T) {
	s := start(t, kernel.Options{})
	id := s.create(t, kernel.ContextOptions{})
	if c := s.run(t, id, "x = 21"); len(c.of(sandbox.ContextEventResult)) != 0 || c.err() != nil {
		t.Errorf("x = 21: %+v, want no result and no error", c.events)
	}
	c := s.run(t, id, "x * 2")
	if got := c.main(); got != "42" {
		t.Errorf("x * 2: main result %q, want 42 (events %+v)", got, c.events)
	}
	if n := c.of(sandbox.ContextEventNumberOfExecutions); len(n) != 1 || n[0].ExecutionCount != 2 || c.events[0].Type != sandbox.ContextEventNumberOfExecutions {
		t.Errorf("second cell: %+v, want execution_count 2 first", n)
	}
	s.run(t, id, "import math\ndef f(v):\n    return math.floor(v) + 1\nn = 0")
	for i := range 100 {
		if c := s.run(t, id, "n = f(n)\nn"); c.main() != strconv.Itoa(i+1) {
			t.Fatalf("run %d: %q (%+v)", i, c.main(), c.events)
		}
	}
	if c := s.run(t, id, "x, n, _"); c.main() != "(21, 100, 100)" {
		t.Errorf("after 100 runs: %q", c.main())
	}
	// A trailing semicolon hides the value, None has none.
	for _, code := range []string{"x;", "x ;  # comment", "None", "print('p')"} {
		if c := s.run(t, id, code); len(c.of(sandbox.ContextEventResult)) != 0 {
			t.Errorf("%q: results %+v, want none", code, c.of(sandbox.ContextEventResult))
		}
	}
}

func TestContextsApartAndFork(t *testing.T) {
	s := start(t, kernel.Options{})
	a := s.create(t, kernel.ContextOptions{})
	b := s.create(t, kernel.ContextOptions{})
	s.run(t, a, "x = 21\nitems = [1]")
	if e := s.run(t, b, "x").err(); e == nil || e.Name != "NameError" {
		t.Errorf("x in a second context: %+v, want NameError", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	f, err := s.k.Fork(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID == a || f.Language != "python" {
		t.Errorf("fork: %+v", f)
	}
	if got := s.run(t, f.ID, "x, items").main(); got != "(21, [1])" {
		t.Errorf("in the fork: %q, want (21, [1])", got)
	}
	s.run(t, a, "x = 1; items.append('a')")
	s.run(t, f.ID, "x = 2; items.append('f')")
	if got := s.run(t, a, "x, items").main(); got != "(1, [1, 'a'])" {
		t.Errorf("original after diverging: %q", got)
	}
	if got := s.run(t, f.ID, "x, items").main(); got != "(2, [1, 'f'])" {
		t.Errorf("fork after diverging: %q", got)
	}
	// A fork of a fork; each counts its own cells from the count it had.
	ff, err := s.k.Fork(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := s.run(t, ff.ID, "items")
	if c.main() != "[1, 'f']" || c.of(sandbox.ContextEventNumberOfExecutions)[0].ExecutionCount != 5 {
		t.Errorf("fork of a fork: %q, %+v", c.main(), c.of(sandbox.ContextEventNumberOfExecutions))
	}
	ids := []string{}
	for _, info := range s.k.List() {
		ids = append(ids, info.ID)
	}
	if !slices.Equal(ids, []string{a, b, f.ID, ff.ID}) {
		t.Errorf("list %v, want %v", ids, []string{a, b, f.ID, ff.ID})
	}
	// The fork's own output reaches its own runs only.
	if got := s.run(t, ff.ID, "import subprocess\nsubprocess.run(['echo', 'raw']); print('py')").stdout(); got != "raw\npy\n" && got != "py\nraw\n" {
		t.Errorf("fork's stdout %q", got)
	}
}

func TestDisplay(t *testing.T) {
	s := start(t, kernel.Options{})
	id := s.create(t, kernel.ContextOptions{})
	png := "\x89PNG\r\n\x1a\nrest"
	c := s.run(t, id, `
class Rich:
    def _repr_html_(self):
        return '<b>rich</b>'
    def _repr_png_(self):
        return b'\x89PNG\r\n\x1a\nrest'
    def _repr_json_(self):
        return {'a': 1}
    def __repr__(self):
        return 'Rich()'
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {'text/markdown': '# hi', 'text/plain': 'B'}, {}
class Broken:
    def _repr_html_(self):
        raise ValueError('no html')
print('before')
display(Rich())
print('between')
display(Bundle(), Broken)
from IPython.display import HTML, Markdown, JSON, SVG, Image
display(HTML('<i>h</i>'), Markdown('*m*'), JSON({'k': [1]}), SVG('<svg/>'), Image(data=b'\x89PNG\r\n\x1a\nrest'))
Rich()
`)
	var types []string
	for _, ev := range c.events {
		types = append(types, ev.Type)
	}
	// Output and results in the order the cell made them: display(Rich()),
	// then Bundle and Broken, the five IPython.display objects, and the
	// last expression's value.
	want := []string{"number_of_executions", "stdout", "result", "stdout"}
	for range 8 {
		want = append(want, "result")
	}
	want = append(want, "end_of_execution")
	if !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v\n%+v", types, want, c.events)
	}
	r := c.of(sandbox.ContextEventResult)
	rich := map[string]string{"text/html": "<b>rich</b>", "image/png": base64.StdEncoding.EncodeToString([]byte(png)),
		"application/json": `{"a": 1}`, "text/plain": "Rich()"}
	for _, i := range []int{0, 8} {
		if !equalMap(r[i].Data, rich) {
			t.Errorf("result %d: %v, want %v", i, r[i].Data, rich)
		}
	}
	if r[0].IsMain || !r[8].IsMain {
		t.Errorf("main results: display %v, last expression %v", r[0].IsMain, r[8].IsMain)
	}
	if !equalMap(r[1].Data, map[string]string{"text/markdown": "# hi", "text/plain": "B"}) {
		t.Errorf("mimebundle: %v", r[1].Data)
	}
	if len(r[2].Data) != 1 || !strings.Contains(r[2].Data["text/plain"], "Broken") {
		t.Errorf("a class (its _repr_html_ unbound): %v, want its repr only", r[2].Data)
	}
	for i, want := range []map[string]string{
		{"text/html": "<i>h</i>"}, {"text/markdown": "*m*"}, {"application/json": `{"k": [1]}`},
		{"image/svg+xml": "<svg/>"}, {"image/png": base64.StdEncoding.EncodeToString([]byte(png))},
	} {
		for k, v := range want {
			if r[3+i].Data[k] != v {
				t.Errorf("IPython.display object %d: %v, want %s %q", i, r[3+i].Data, k, v)
			}
		}
	}
	if got := s.run(t, id, "display(Broken())").of(sandbox.ContextEventStderr); len(got) != 1 || !strings.Contains(got[0].Text, "no html") {
		t.Errorf("a failing _repr_html_: stderr %+v, want it reported", got)
	}
}

func equalMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestErrors(t *testing.T) {
	s := start(t, kernel.Options{})
	id := s.create(t, kernel.ContextOptions{})
	c := s.run(t, id, "def g():\n    return 1 / 0\nprint('out')\ng()")
	e := c.err()
	if e == nil || e.Name != "ZeroDivisionError" || e.Value != "division by zero" {
		t.Fatalf("error %+v", e)
	}
	tb := strings.Join(e.Traceback, "")
	if !strings.Contains(tb, `File "<cell 1>", line 4, in <module>`) || !strings.Contains(tb, "return 1 / 0") ||
		strings.Contains(tb, "<string>") || strings.Contains(tb, "run_code") {
		t.Errorf("traceback:\n%s\nwant the cell's frames and lines, none of the runner's", tb)
	}
	if got := c.stdout(); got != "out\n" {
		t.Errorf("stdout before the error %q", got)
	}
	if e := s.run(t, id, "x = (").err(); e == nil || e.Name != "SyntaxError" || !strings.Contains(strings.Join(e.Traceback, ""), "<cell 2>") {
		t.Errorf("syntax error %+v", e)
	}
	if e := s.run(t, id, "raise SystemExit(3)").err(); e == nil || e.Name != "SystemExit" || e.Value != "3" {
		t.Errorf("SystemExit %+v", e)
	}
	if got := s.run(t, id, "g.__name__").main(); got != "'g'" {
		t.Errorf("after errors: %q, want the context alive with its state", got)
	}
	// The process itself ends: the context restarts, and says so.
	c = s.run(t, id, "import os; os._exit(3)")
	if e := c.err(); e == nil || e.Name != kernel.ErrorContextRestarted || !strings.Contains(e.Value, "exit status 3") {
		t.Errorf("os._exit: %+v", c.events)
	}
	if e := s.run(t, id, "g").err(); e == nil || e.Name != "NameError" {
		t.Errorf("after a restart: %+v, want a fresh state", e)
	}
}

// waitFile is python that waits (boundedly) until a file exists.
func waitFile(path string) string {
	return "import os, time\nfor _ in range(3000):\n    if os.path.exists(" + quote(path) + "):\n        break\n    time.sleep(0.01)\nelse:\n    raise TimeoutError('no ' + " + quote(path) + ")\n"
}

// waitForFile polls for a file that a cell makes (bounded by waitLimit).
func waitForFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("no %s", path)
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// runAsync runs code in the background; events arrive on the channel,
// which closes when the run returns.
func (s *localBox) runAsync(id, code string, timeout time.Duration) (<-chan sandbox.ContextEvent, <-chan error) {
	evs := make(chan sandbox.ContextEvent, 1000)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		errc <- s.k.Run(ctx, id, code, timeout, func(ev sandbox.ContextEvent) { evs <- ev })
		close(evs)
	}()
	return evs, errc
}

func next(t *testing.T, evs <-chan sandbox.ContextEvent, typ string) sandbox.ContextEvent {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("events ended before a %s", typ)
			}
			if ev.Type == typ {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no %s event", typ)
		}
	}
}

// TestStreaming: a cell's first line arrives while the cell still runs (it
// waits for a file the test creates only once the line is in).
func TestStreaming(t *testing.T) {
	s := start(t, kernel.Options{})
	id := s.create(t, kernel.ContextOptions{})
	flag := filepath.Join(s.root, "tmp", "go-on")
	evs, errc := s.runAsync(id, "print('first')\n"+waitFile(flag)+"print('second')", 0)
	if ev := next(t, evs, sandbox.ContextEventStdout); ev.Text != "first\n" {
		t.Fatalf("first output %q", ev.Text)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, evs, sandbox.ContextEventStdout); ev.Text != "second\n" {
		t.Errorf("second output %q", ev.Text)
	}
	next(t, evs, sandbox.ContextEventEndOfExecution)
	if err := <-errc; err != nil {
		t.Error(err)
	}
}

func TestInterruptAndTimeout(t *testing.T) {
	s := start(t, kernel.Options{Grace: 500 * time.Millisecond})
	id := s.create(t, kernel.ContextOptions{})
	s.run(t, id, "x = 1")
	// The cell says it spins by a file, not by output: an interrupt while
	// an event is written is raised after it, another path.
	flag := filepath.Join(s.root, "tmp", "spinning")
	evs, errc := s.runAsync(id, "open("+quote(flag)+", 'w').close()\nwhile True:\n    pass", 0)
	waitForFile(t, flag)
	ctx := t.Context()
	if err := s.k.Interrupt(ctx, id); err != nil {
		t.Fatal(err)
	}
	if e := next(t, evs, sandbox.ContextEventError); e.Name != "KeyboardInterrupt" || !strings.Contains(strings.Join(e.Traceback, ""), "<cell 2>") {
		t.Errorf("interrupted: %+v", e)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := s.run(t, id, "x").main(); got != "1" {
		t.Errorf("after an interrupt: %q, want the state kept", got)
	}
	if err := s.k.Interrupt(ctx, id); err != nil {
		t.Errorf("interrupt with no cell running: %v", err)
	}
	if got := s.run(t, id, "x + 1").main(); got != "2" {
		t.Errorf("after an idle interrupt: %q", got)
	}

	// Past its timeout: interrupted, the state kept.
	c := s.runTimeout(t, id, "while True:\n    pass", 200*time.Millisecond)
	if e := c.err(); e == nil || e.Name != kernel.ErrorTimeout || !strings.Contains(e.Value, "interrupted") || len(e.Traceback) == 0 {
		t.Errorf("timeout: %+v", c.events)
	}
	if got := s.run(t, id, "x").main(); got != "1" {
		t.Errorf("after a timeout: %q, want the state kept", got)
	}
	// A cell that ignores the interrupt: its context restarts.
	c = s.runTimeout(t, id, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", 200*time.Millisecond)
	if e := c.err(); e == nil || e.Name != kernel.ErrorTimeout || !strings.Contains(e.Value, "restarted") {
		t.Errorf("stuck past its timeout: %+v", c.events)
	}
	if e := s.run(t, id, "x").err(); e == nil || e.Name != "NameError" {
		t.Errorf("after a restart for a timeout: %+v, want a fresh state", e)
	}
	if got := s.run(t, id, "1 + 1").main(); got != "2" {
		t.Errorf("restarted context: %q", got)
	}
}

// TestQueueAndConcurrency: runs on one context take turns; runs on two
// contexts run at once (the first waits for a file only the second makes).
func TestQueueAndConcurrency(t *testing.T) {
	s := start(t, kernel.Options{})
	a := s.create(t, kernel.ContextOptions{})
	b := s.create(t, kernel.ContextOptions{})
	flag := filepath.Join(s.root, "tmp", "from-b")
	evs1, err1 := s.runAsync(a, "print('one', flush=True)\n"+waitFile(flag)+"order = ['one']", 0)
	next(t, evs1, sandbox.ContextEventStdout)
	evs2, err2 := s.runAsync(a, "order.append('two')\norder", 0)
	c := s.run(t, b, "open("+quote(flag)+", 'w').close()")
	if c.err() != nil {
		t.Fatal(c.err())
	}
	next(t, evs1, sandbox.ContextEventEndOfExecution)
	if r := next(t, evs2, sandbox.ContextEventResult); r.Data["text/plain"] != "['one', 'two']" {
		t.Errorf("queued run: %v", r.Data)
	}
	for _, errc := range []<-chan error{err1, err2} {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

func TestOptionsAndLifecycle(t *testing.T) {
	s := start(t, kernel.Options{})
	ctx := t.Context()
	if err := os.MkdirAll(filepath.Join(s.root, "workspace", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := s.create(t, kernel.ContextOptions{Cwd: "/workspace/sub", Env: []string{"FOO=bar", "LANG=C"}})
	c := s.run(t, id, "import os\nos.getcwd().endswith('/workspace/sub'), os.environ['FOO'], os.environ['LANG'], os.environ['MPLBACKEND']")
	if got := c.main(); got != "(True, 'bar', 'C', 'module://corral_inline')" {
		t.Errorf("cwd and env: %q (%+v)", got, c.events)
	}
	for _, o := range []kernel.ContextOptions{
		{Language: "cobol"},
		{Language: "python", Cwd: "relative"},
		{Language: "python", Cwd: "/workspace/../etc"},
		{Language: "python", Cwd: "/workspace/missing"},
		{Language: "python", Env: []string{"NOEQUALS"}},
		{Language: "python", Env: []string{"=x"}},
	} {
		if _, err := s.k.Create(ctx, o); !errors.Is(err, kernel.ErrInvalid) {
			t.Errorf("create %+v: %v, want ErrInvalid", o, err)
		}
	}
	if err := s.k.Run(ctx, id, strings.Repeat("#", kernel.MaxCodeSize+1), 0, func(sandbox.ContextEvent) {}); !errors.Is(err, kernel.ErrInvalid) {
		t.Errorf("oversized code: %v", err)
	}
	s.run(t, id, "x = 1")
	if err := s.k.Restart(ctx, id); err != nil {
		t.Fatal(err)
	}
	c = s.run(t, id, "import os\n'x' in dir(), os.environ['FOO']")
	if got := c.main(); got != "(False, 'bar')" {
		t.Errorf("after restart: %q", got)
	}
	if n := c.of(sandbox.ContextEventNumberOfExecutions); n[0].ExecutionCount != 1 {
		t.Errorf("execution count after restart: %d", n[0].ExecutionCount)
	}
	if err := s.k.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"run":       s.k.Run(ctx, id, "1", 0, func(sandbox.ContextEvent) {}),
		"interrupt": s.k.Interrupt(ctx, id),
		"restart":   s.k.Restart(ctx, id),
		"delete":    s.k.Delete(ctx, id),
	} {
		if !errors.Is(err, kernel.ErrNotFound) {
			t.Errorf("%s after delete: %v, want ErrNotFound", name, err)
		}
	}
	if _, err := s.k.Fork(ctx, id); !errors.Is(err, kernel.ErrNotFound) {
		t.Errorf("fork after delete: %v", err)
	}
	if len(s.k.List()) != 0 {
		t.Errorf("list after delete: %v", s.k.List())
	}
}

// TestDeleteWhileRunning: a run whose context is deleted returns
// ErrNotFound.
func TestDeleteWhileRunning(t *testing.T) {
	s := start(t, kernel.Options{})
	id := s.create(t, kernel.ContextOptions{})
	evs, errc := s.runAsync(id, "print('in', flush=True)\nwhile True:\n    pass", 0)
	next(t, evs, sandbox.ContextEventStdout)
	if err := s.k.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, kernel.ErrNotFound) {
		t.Errorf("run of a deleted context: %v", err)
	}
}

// TestConcurrentForks: forks of one context made at once all hold its
// state.
func TestConcurrentForks(t *testing.T) {
	s := start(t, kernel.Options{})
	id := s.create(t, kernel.ContextOptions{})
	s.run(t, id, "x = 7")
	var wg sync.WaitGroup
	ids := make([]string, 4)
	for i := range ids {
		wg.Go(func() {
			info, err := s.k.Fork(t.Context(), id)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = info.ID
		})
	}
	wg.Wait()
	for _, f := range ids {
		if f != "" {
			if got := s.run(t, f, "x").main(); got != "7" {
				t.Errorf("fork %s: %q", f, got)
			}
		}
	}
}

// BenchmarkLocal measures a cell `x + 1` (Run), a fork (Fork) and a fresh
// context (Create) with the local agent, no sandbox: the runner's and the
// protocol's own cost. BenchmarkSandbox measures them in sandboxes.
func BenchmarkLocal(b *testing.B) {
	s := start(b, kernel.Options{})
	id := s.create(b, kernel.ContextOptions{})
	s.run(b, id, "x = 1")
	b.Run("Run", func(b *testing.B) {
		for b.Loop() {
			if got := s.run(b, id, "x + 1").main(); got != "2" {
				b.Fatalf("x + 1: %q", got)
			}
		}
		reportMS(b)
	})
	for _, what := range []string{"Fork", "Create"} {
		b.Run(what, func(b *testing.B) {
			for b.Loop() {
				var info sandbox.CodeContext
				var err error
				if what == "Fork" {
					info, err = s.k.Fork(b.Context(), id)
				} else {
					info, err = s.k.Create(b.Context(), kernel.ContextOptions{Language: "python"})
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.k.Delete(b.Context(), info.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			reportMS(b)
		})
	}
}

// TestBash: a bash context keeps variables, the working directory and the
// environment; a failing command is an error, an interrupt ends the
// running command line and keeps the shell; bash contexts do not fork.
func TestBash(t *testing.T) {
	s := start(t, kernel.Options{Grace: 500 * time.Millisecond})
	id := s.create(t, kernel.ContextOptions{Language: "bash"})
	if err := os.MkdirAll(filepath.Join(s.root, "workspace", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c := s.run(t, id, "x=5; export Y=7; cd sub\nf() { echo \"f $1\"; }"); c.err() != nil {
		t.Fatalf("first cell: %+v", c.events)
	}
	c := s.run(t, id, "echo $x $Y; basename \"$PWD\"; f 1; bash -c 'echo child $Y' >&2")
	if got := c.stdout(); got != "5 7\nsub\nf 1\n" {
		t.Errorf("state kept: stdout %q (%+v)", got, c.events)
	}
	if got := c.of(sandbox.ContextEventStderr); len(got) != 1 || got[0].Text != "child 7\n" {
		t.Errorf("stderr %+v", got)
	}
	if n := c.of(sandbox.ContextEventNumberOfExecutions); len(n) != 1 || n[0].ExecutionCount != 2 {
		t.Errorf("execution count %+v", n)
	}
	if e := s.run(t, id, "false").err(); e == nil || e.Name != "ExitStatus" || e.Value != "1" {
		t.Errorf("false: %+v", e)
	}
	if got := s.run(t, id, "read line; echo \"[$line]\"").stdout(); got != "[]\n" {
		t.Errorf("a cell's stdin: %q, want empty", got)
	}
	// A loop of the shell's own: an interrupt that lands as bash starts a
	// command (sleep) is the command's, and lost (bash_context.sh).
	for _, code := range []string{"echo started; while :; do :; done"} {
		evs, errc := s.runAsync(id, code, 0)
		next(t, evs, sandbox.ContextEventStdout)
		if err := s.k.Interrupt(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if e := next(t, evs, sandbox.ContextEventError); e.Name != "KeyboardInterrupt" {
			t.Errorf("%q interrupted: %+v", code, e)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got := s.run(t, id, "echo $x").stdout(); got != "5\n" {
			t.Errorf("after interrupting %q: %q", code, got)
		}
	}
	// Past its timeout the cell ends, interrupted or its shell restarted.
	c = s.runTimeout(t, id, "sleep 600", 200*time.Millisecond)
	if e := c.err(); e == nil || e.Name != kernel.ErrorTimeout {
		t.Errorf("timeout: %+v", c.events)
	}
	s.run(t, id, "x=5")
	if _, err := s.k.Fork(t.Context(), id); !errors.Is(err, kernel.ErrInvalid) {
		t.Errorf("fork of a bash context: %v, want ErrInvalid", err)
	}
	if _, err := s.k.Create(t.Context(), kernel.ContextOptions{Language: "bash", Cwd: "/workspace/missing"}); !errors.Is(err, kernel.ErrInvalid) {
		t.Errorf("bash in a missing directory: %v, want ErrInvalid", err)
	}
	if c := s.run(t, id, "exit 3"); c.err() == nil || c.err().Name != kernel.ErrorContextRestarted {
		t.Errorf("exit: %+v", c.events)
	}
	if got := s.run(t, id, "echo \"[$x]\"").stdout(); got != "[]\n" {
		t.Errorf("after exit: %q, want a fresh shell", got)
	}
}

// TestJavascript: a javascript context keeps globals and functions, shows
// its last value, awaits a promise, reports errors with the cell's frames,
// and a cell past its timeout ends.
func TestJavascript(t *testing.T) {
	_, err := os.Stat("/usr/bin/node")
	testenv.Need(t, err == nil, "/usr/bin/node (javascript contexts' unit tests run it)")
	s := start(t, kernel.Options{Grace: 500 * time.Millisecond})
	id := s.create(t, kernel.ContextOptions{Language: "javascript"})
	s.run(t, id, "var x = 21; let y = 2; function f(a) { return a * 2 }")
	c := s.run(t, id, "console.log('hi', {a: 1}); process.stdout.write('raw\\n'); f(x)")
	if got := c.main(); got != "42" {
		t.Errorf("f(x): %q (%+v)", got, c.events)
	}
	// console.log's events and process.stdout's raw output travel apart.
	if got := c.stdout(); got != "hi { a: 1 }\nraw\n" && got != "raw\nhi { a: 1 }\n" {
		t.Errorf("stdout %q", got)
	}
	if got := s.run(t, id, "new Promise(r => setTimeout(() => r(x + y), 10))").main(); got != "23" {
		t.Errorf("a promise: %q", got)
	}
	e := s.run(t, id, "null.foo").err()
	if e == nil || e.Name != "TypeError" || !strings.Contains(strings.Join(e.Traceback, ""), "<cell 4>") || strings.Contains(strings.Join(e.Traceback, ""), "node:vm") {
		t.Errorf("error %+v", e)
	}
	// An interrupt of node is best effort (javascript_context.js says
	// why): past its timeout the cell ends all the same, the context then
	// interrupted or restarted.
	c = s.runTimeout(t, id, "while (true) {}", 200*time.Millisecond)
	if e := c.err(); e == nil || (e.Name != kernel.ErrorTimeout && e.Name != kernel.ErrorContextRestarted) {
		t.Errorf("past its timeout: %+v", c.events)
	}
	if got := s.run(t, id, "1 + 1").main(); got != "2" {
		t.Errorf("after a timeout: %q", got)
	}
	if _, err := s.k.Fork(t.Context(), id); !errors.Is(err, kernel.ErrInvalid) {
		t.Errorf("fork of a javascript context: %v, want ErrInvalid", err)
	}
}
