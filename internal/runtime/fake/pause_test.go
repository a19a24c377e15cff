package fake_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
)

// TestPause runs the conformance suite's pause case on fake runtimes: a
// gvisor-tier one with pausing enabled keeps a process's memory across
// Pause and Restore, a container-tier one keeps the files only.
func TestPause(t *testing.T) {
	for _, tier := range []runtime.Tier{runtime.TierGVisor, runtime.TierContainer} {
		t.Run(string(tier), func(t *testing.T) {
			rt := fake.New(tier, t.TempDir(), os.Args[0], os.Stderr)
			rt.EnablePause()
			runtimetest.Pause(t, rt, runtimetest.Env{NoLeftovers: func(id string) []string {
				if slices.ContainsFunc(rt.Live(), func(s *fake.Sandbox) bool { return s.ID() == id }) {
					return []string{"live sandbox " + id}
				}
				return nil
			}})
		})
	}
}

// TestContainerTierNotPausable: like runc's, a container-tier fake
// sandbox is no Pauser, pausing enabled or not.
func TestContainerTierNotPausable(t *testing.T) {
	rt := fake.New(runtime.TierContainer, t.TempDir(), os.Args[0], os.Stderr)
	rt.EnablePause()
	sb, err := rt.Create(t.Context(), runtime.Spec{Workspace: filepath.Join(t.TempDir(), "disk.img")})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	if _, ok := sb.(runtime.Pauser); ok {
		t.Error("a container-tier fake sandbox is a Pauser")
	}
}
