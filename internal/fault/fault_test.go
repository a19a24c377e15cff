package fault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestKindsNamed: every kind has a name, and the list holds each once.
func TestKindsNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		n := k.String()
		if n == "" || strings.HasPrefix(n, "kind(") || seen[n] {
			t.Errorf("kind %d: name %q", k, n)
		}
		seen[n] = true
	}
	if len(seen) != int(numKinds) {
		t.Errorf("%d names for %d kinds", len(seen), numKinds)
	}
}

// TestOf: the first fault on an error's chain is its answer; a context's
// end is canceled or deadline exceeded; anything else is internal and
// says nothing of its text.
func TestOf(t *testing.T) {
	sentinel := &Error{Kind: FailedPrecondition, Code: "sandbox_paused", Message: "paused", RetryAfter: time.Second}
	refined := sentinel.With("path", "name a %s", "file")
	for _, c := range []struct {
		name string
		err  error
		kind Kind
		code string
		msg  string
	}{
		{"sentinel", sentinel, FailedPrecondition, "sandbox_paused", "paused"},
		{"wrapped", fmt.Errorf("pause %s: %w", "x", sentinel), FailedPrecondition, "sandbox_paused", "paused"},
		{"refined", fmt.Errorf("op: %w", refined), FailedPrecondition, "sandbox_paused", "name a file"},
		{"first of two", fmt.Errorf("%w: %w", New(NotFound, "gone"), sentinel), NotFound, "", "gone"},
		{"fault over context", fmt.Errorf("%w: %w", New(Unavailable, "later"), context.DeadlineExceeded), Unavailable, "", "later"},
		{"canceled", fmt.Errorf("call: %w", context.Canceled), Canceled, "", "the call was canceled"},
		{"deadline", context.DeadlineExceeded, DeadlineExceeded, "", "the call took longer than its deadline"},
		{"other", errors.New("runc said secret-words"), Internal, "", internalMessage},
	} {
		f := Of(c.err)
		if f.Kind != c.kind || f.Code != c.code || f.Message != c.msg {
			t.Errorf("%s: %v %q %q, want %v %q %q", c.name, f.Kind, f.Code, f.Message, c.kind, c.code, c.msg)
		}
		if !errors.Is(f, c.err) && !errors.Is(c.err, f) {
			t.Errorf("%s: the fault does not wrap the error", c.name)
		}
	}
	if Of(nil) != nil || KindOf(nil) != Internal {
		t.Error("Of(nil) is not nil")
	}
	if !errors.Is(refined, sentinel) || refined.Field != "path" || refined.RetryAfter != time.Second {
		t.Errorf("With lost the sentinel: %+v", refined)
	}
	if got := refined.Error(); got != "path: name a file" {
		t.Errorf("Error() = %q: the sentinel's words repeated", got)
	}
	if got := Of(errors.New("secret")).Error(); !strings.Contains(got, "secret") {
		t.Errorf("an internal fault's Error() %q lost its cause (for the log)", got)
	}
}

// TestRetryAfterSeconds rounds up: a client waits at least as long as
// asked.
func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 0, time.Second: 1, 1500 * time.Millisecond: 2, 30 * time.Second: 30} {
		if got := (&Error{RetryAfter: d}).RetryAfterSeconds(); got != want {
			t.Errorf("%v: %d, want %d", d, got, want)
		}
	}
}

// TestTable: a code with a row of its own is answered by it, any other by
// its kind's; Missing names the kinds without a row.
func TestTable(t *testing.T) {
	tab := Table[int]{Kinds: map[Kind]int{NotFound: 404, ResourceExhausted: 429}, Codes: map[string]int{"payload_too_large": 413}}
	if got := tab.Answer(&Error{Kind: ResourceExhausted, Code: "payload_too_large"}); got != 413 {
		t.Errorf("code row: %d", got)
	}
	if got := tab.Answer(&Error{Kind: ResourceExhausted, Code: "queue_full"}); got != 429 {
		t.Errorf("kind row: %d", got)
	}
	other := tab.With(NotFound, 410)
	if other.Answer(&Error{Kind: NotFound}) != 410 || tab.Answer(&Error{Kind: NotFound}) != 404 {
		t.Error("With changed the table it copies, or not the copy")
	}
	missing := tab.missing()
	if len(missing) != int(numKinds)-2 {
		t.Errorf("missing %v", missing)
	}
	for _, k := range missing {
		if k == NotFound || k == ResourceExhausted {
			t.Errorf("%v has a row but is missing", k)
		}
	}
	if tab.Check() == nil {
		t.Error("Check passes a table with kinds missing")
	}
}
