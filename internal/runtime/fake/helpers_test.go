package fake_test

import (
	"os"
	"testing"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
)

func fakeRuntime(t *testing.T, dir string) *fake.Runtime {
	return fake.New(runtime.TierContainer, dir, os.Args[0], os.Stderr)
}

// run runs argv in sb with HOME=/workspace and returns its stdout.
func run(t *testing.T, sb runtime.Sandbox, argv ...string) string {
	t.Helper()
	st, out := runtimetest.ExecReq(t, sb, agent.StartRequest{Argv: argv, Env: []string{"PATH=/usr/bin:/bin", "HOME=/workspace"}, Dir: "/workspace"})
	if st.Code != 0 {
		t.Fatalf("%v: %+v, stderr %q", argv, st, out.ErrString())
	}
	return out.String()
}
