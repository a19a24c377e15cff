package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/fault"
)

// TestRefusalsNameKinds: every kind the refusal table names is one an
// agent sends (an errno's name or one of its own), so a misspelt name
// cannot sit there unanswered.
func TestRefusalsNameKinds(t *testing.T) {
	own := map[Kind]bool{KindInvalid: true, KindNotRegular: true, KindSymlink: true, KindZygote: true,
		KindDirty: true, KindLimit: true, KindReset: true, KindInternal: true}
	check := func(k Kind) {
		if !own[k] && k.Errno() == 0 {
			t.Errorf("%q is neither an errno's name nor one of the agent's kinds", k)
		}
	}
	for k := range refusals {
		check(k)
	}
	for k, to := range aliases {
		check(k)
		if _, ok := refusals[to]; !ok {
			t.Errorf("alias %s → %s, which has no row", k, to)
		}
	}
}

// TestRefusalFault: a refusal is answered by its kind; the agent's words
// stay in the wrapped error (for the log), never in the message.
func TestRefusalFault(t *testing.T) {
	const secret = "agent-words-7f3a"
	for _, c := range []struct {
		kind Kind
		want fault.Kind
	}{
		{"ENOENT", fault.NotFound},
		{"EEXIST", fault.AlreadyExists},
		{"EPERM", fault.PermissionDenied},
		{"EDQUOT", fault.ResourceExhausted},
		{KindSymlink, fault.InvalidArgument},
		// What a hostile path provokes (issue 26): a client's error.
		{"EROFS", fault.InvalidArgument},
		{"ENAMETOOLONG", fault.InvalidArgument},
		{"ELOOP", fault.InvalidArgument},
		{"ENOTDIR", fault.InvalidArgument},
		{"EXDEV", fault.InvalidArgument},
		{"ENXIO", fault.InvalidArgument}, // a socket opened
		{"E2BIG", fault.InvalidArgument}, // an exec's argv and env past ARG_MAX
		{"EIO", fault.Internal},
		{KindZygote, fault.Internal},
	} {
		re := &RemoteError{Kind: c.kind, Message: secret}
		f := fault.Of(re)
		if f.Kind != c.want {
			t.Errorf("%s: %v, want %v", c.kind, f.Kind, c.want)
		}
		if strings.Contains(f.Message, secret) || f.Message == "" {
			t.Errorf("%s: message %q", c.kind, f.Message)
		}
		if !errors.Is(f, re) || !strings.Contains(f.Error(), secret) {
			t.Errorf("%s: the fault %q does not wrap the refusal", c.kind, f.Error())
		}
	}
}
