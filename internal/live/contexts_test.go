package live

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// The fake runtime's sandboxes run their agent in local mode: contexts
// here run the host's /usr/bin/python3.
const hostPython = "/usr/bin/python3"

// runCell runs code in context cid of live sandbox box and returns its
// events.
func (u *unit) runCell(cid, code string) []sandbox.ContextEvent {
	u.t.Helper()
	var evs []sandbox.ContextEvent
	if err := u.m.RunContext(u.t.Context(), "t", "box", cid, code, 30*time.Second, func(ev sandbox.ContextEvent) {
		evs = append(evs, ev)
	}); err != nil {
		u.t.Fatalf("run %q: %v", code, err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != sandbox.ContextEventEndOfExecution {
		u.t.Fatalf("run %q: events %+v end without end_of_execution", code, evs)
	}
	return evs
}

func mainText(evs []sandbox.ContextEvent) string {
	for _, ev := range evs {
		if ev.Type == sandbox.ContextEventResult && ev.IsMain {
			return ev.Data["text/plain"]
		}
	}
	return ""
}

func errorName(evs []sandbox.ContextEvent) string {
	for _, ev := range evs {
		if ev.Type == sandbox.ContextEventError {
			return ev.Name
		}
	}
	return ""
}

// TestLiveContexts: contexts of a live sandbox keep state, are separate,
// fork, list, restart and delete; unknown ones are not found; a sandbox
// made again has lost them.
func TestLiveContexts(t *testing.T) {
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts run it in local mode)")
	u := newUnit(t)
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python"})
	a, err := u.m.CreateContext(t.Context(), "t", "box", kernel.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Language != "python" || a.Cwd != "/workspace" || a.ID == "" {
		t.Errorf("context %+v", a)
	}
	u.runCell(a.ID, "x = 21")
	if got := mainText(u.runCell(a.ID, "x * 2")); got != "42" {
		t.Errorf("x * 2 = %q, want 42", got)
	}
	b, err := u.m.CreateContext(t.Context(), "t", "box", kernel.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if got := errorName(u.runCell(b.ID, "x")); got != "NameError" {
		t.Errorf("a second context sees x: error %q, want NameError", got)
	}
	f, err := u.m.ForkContext(t.Context(), "t", "box", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	u.runCell(f.ID, "x = 1")
	if got := mainText(u.runCell(a.ID, "x")); got != "21" {
		t.Errorf("the forked context's x = %q after the fork changed its own, want 21", got)
	}
	if got := mainText(u.runCell(f.ID, "x")); got != "1" {
		t.Errorf("the fork's x = %q, want 1", got)
	}
	list, err := u.m.Contexts(t.Context(), "t", "box")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	if strings.Join(ids, ",") != strings.Join([]string{a.ID, b.ID, f.ID}, ",") {
		t.Errorf("contexts %v, want %v %v %v", ids, a.ID, b.ID, f.ID)
	}
	if err := u.m.RestartContext(t.Context(), "t", "box", a.ID); err != nil {
		t.Fatal(err)
	}
	if got := errorName(u.runCell(a.ID, "x")); got != "NameError" {
		t.Errorf("after a restart: error %q, want NameError", got)
	}
	if err := u.m.DeleteContext(t.Context(), "t", "box", b.ID); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"run a deleted one": u.m.RunContext(t.Context(), "t", "box", b.ID, "1", 0, func(sandbox.ContextEvent) {}),
		"delete it again":   u.m.DeleteContext(t.Context(), "t", "box", b.ID),
		"interrupt unknown": u.m.InterruptContext(t.Context(), "t", "box", "nope"),
	} {
		if !errors.Is(err, kernel.ErrNotFound) {
			t.Errorf("%s: %v, want kernel.ErrNotFound", name, err)
		}
	}
	if _, err := u.m.CreateContext(t.Context(), "t", "box", kernel.ContextOptions{Language: "cobol"}); !errors.Is(err, kernel.ErrInvalid) {
		t.Errorf("a language without contexts: %v, want kernel.ErrInvalid", err)
	}
	if _, err := u.m.Contexts(t.Context(), "t", "other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("contexts of no sandbox: %v, want ErrNotFound", err)
	}

	// The sandbox dies: the one made again has no contexts.
	if err := u.heldSandbox("box").Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	err = u.m.RunContext(t.Context(), "t", "box", a.ID, "1", 0, func(sandbox.ContextEvent) {})
	if !errors.Is(err, kernel.ErrNotFound) {
		t.Errorf("a context after its sandbox was made again: %v, want kernel.ErrNotFound", err)
	}
	if list, err := u.m.Contexts(t.Context(), "t", "box"); err != nil || len(list) != 0 {
		t.Errorf("contexts of the sandbox made again: %v, %v; want none", list, err)
	}
	c, err := u.m.CreateContext(t.Context(), "t", "box", kernel.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(u.runCell(c.ID, "6 * 7")); got != "42" {
		t.Errorf("in the sandbox made again 6 * 7 = %q", got)
	}
}
