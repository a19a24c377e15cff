package envd

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestRealLinks: envdLinks on real sandboxes of both tiers, with links
// to the image's files (read-only) and the sandbox's /tmp; and a move
// from /tmp to /workspace, separate file systems, is invalid_argument
// saying so.
func TestRealLinks(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			e := testenv.Engine(t)
			h := harnessOn(t, e, e.Fleet(), sandbox.Isolation(tier), live.DefaultConfig())
			envdLinks(t, h, "/tmp/out", true)
			move := client[MoveRequest, MoveResponse](h.base, "/filesystem.Filesystem/Move")
			_, err := move.CallUnary(t.Context(), connect.NewRequest(&MoveRequest{Source: "/tmp/keep", Destination: "/workspace/keep"}))
			if ce := new(connect.Error); codeOf(err) != connect.CodeInvalidArgument || !errors.As(err, &ce) || !strings.Contains(ce.Message(), "separate file systems") {
				t.Errorf("Move from /tmp to /workspace: %v, want invalid_argument", err)
			}
		})
	}
}
