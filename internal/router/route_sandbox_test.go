package router_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestAutoRouting runs requests with isolation "auto" through a real
// engine: code calling subprocess runs on gVisor (its uname says so),
// plain arithmetic on runc, and each record says why.
func TestAutoRouting(t *testing.T) {
	e := testenv.Engine(t)
	cases := []struct {
		name   string
		req    sandbox.ExecuteRequest
		tier   string
		reason string
		stdout string // in stdout
	}{
		{name: "subprocess", req: sandbox.ExecuteRequest{Language: "python",
			Code: "import subprocess\nprint(subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout, end='')"},
			// runsc's uname says so ("4.19.0-gvisor").
			tier: "gvisor", reason: "auto: python uses subprocess (line 1)", stdout: "gvisor"},
		{name: "arithmetic", req: sandbox.ExecuteRequest{Language: "python", Code: "print(sum(range(100)))"},
			tier: "container", reason: "auto: no risky constructs", stdout: "4950\n"},
		{name: "child_process", req: sandbox.ExecuteRequest{Language: "javascript",
			Code: "const { execFileSync } = require('child_process');\nprocess.stdout.write(execFileSync('uname', ['-r']))"},
			tier: "gvisor", reason: "auto: javascript uses child_process (line 1)", stdout: "gvisor"},
		{name: "untrusted", req: sandbox.ExecuteRequest{Language: "bash", Code: "echo $(( 6 * 7 ))", Untrusted: true},
			tier: "gvisor", reason: "auto: untrusted", stdout: "42\n"},
		{name: "long timeout", req: sandbox.ExecuteRequest{Language: "bash", Code: "echo $(( 6 * 7 ))", Limits: sandbox.Limits{TimeoutMS: 45000}},
			tier: "gvisor", reason: "auto: timeout_ms 45000 > 30000", stdout: "42\n"},
		{name: "requested", req: sandbox.ExecuteRequest{Language: "python", Code: "import socket", Tier: sandbox.TierContainer},
			tier: "container", reason: "requested"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			job, err := e.Prepare(c.req)
			if err != nil {
				t.Fatal(err)
			}
			res := e.Run(t.Context(), job, nil)
			if res.Status != sandbox.StatusSuccess {
				t.Fatalf("status %s %+v\n%s", res.Status, res.Error, res.Stderr)
			}
			if res.Tier != c.tier || res.TierReason != c.reason {
				t.Errorf("record says tier %s (%q), want %s (%q)", res.Tier, res.TierReason, c.tier, c.reason)
			}
			if !strings.Contains(res.Stdout, c.stdout) {
				t.Errorf("stdout %q does not hold %q", res.Stdout, c.stdout)
			}
		})
	}
}

// TestAutoWithoutGVisor: on a server without the gVisor tier, auto runs
// risky code on the container tier and says so; asking for gVisor
// explicitly is still refused.
func TestAutoWithoutGVisor(t *testing.T) {
	dir := t.TempDir()
	var rts []runtime.Runtime
	for _, rt := range testenv.Runtimes(t, dir) {
		if rt.Tier() == runtime.TierContainer {
			rts = append(rts, rt)
		}
	}
	store := images.NewStore(filepath.Join(dir, "images"), 1000, 1000)
	e, err := engine.New(engine.DefaultConfig(), fleet.New(fleet.Config{}, rts, store, nil), store, filepath.Join(dir, "engine"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	job, err := e.Prepare(sandbox.ExecuteRequest{Language: "python", Code: "import subprocess"})
	if err != nil {
		t.Fatal(err)
	}
	want := "auto: python uses subprocess (line 1); the gvisor tier is unavailable here, so container"
	if job.Tier != runtime.TierContainer || job.TierReason != want {
		t.Errorf("routed to %s (%q), want container (%q)", job.Tier, job.TierReason, want)
	}
	// Refused under the name the request gave the tier.
	for field, req := range map[string]sandbox.ExecuteRequest{
		"tier":      {Language: "python", Code: "print(1)", Tier: sandbox.TierGVisor},
		"isolation": {Language: "python", Code: "print(1)", Isolation: sandbox.TierGVisor},
	} {
		_, err = e.Prepare(req)
		var ie *validate.InputError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("explicit gvisor without the tier: %v, want an input error on %s", err, field)
		}
	}
}
