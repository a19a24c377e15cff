// Package e2b runs E2B's own SDKs, unmodified, against a real corral serve:
// the node suite suite.test.js on the pinned e2b and @e2b/code-interpreter
// packages (package.json, package-lock.json, installed by
// scripts/npm-deps.sh from a cache outside the clone), on each tier and a
// part of it over https with a local CA, and the agent-style example
// examples/e2b-js. The SDKs are pointed at the server by E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY alone (and NODE_EXTRA_CA_CERTS over
// https).
package e2b

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/tlscert/certtest"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// prepare checks what the node runs need and installs the pinned npm
// packages (a no-op when they are installed from the present lockfiles).
func prepare(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	node, err := exec.LookPath("node")
	testenv.Need(t, err == nil, "node (scripts/deps.sh installs it)")
	testenv.PythonImage(t)
	root := testenv.ModuleRoot(t)
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "scripts", "npm-deps.sh"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/npm-deps.sh: %v\n%s", err, out)
	}
	return node
}

// server starts corral serve whose E2B sandboxes are made on tier.
func server(t *testing.T, tier string) *testserver.Server {
	t.Helper()
	if tier == "gvisor" {
		testenv.Runtime(t, "runsc")
	}
	return testserver.Start(t, testserver.Options{NoPool: true,
		Extra:  []string{"--image-dir", testenv.ImageDir()},
		Config: fmt.Sprintf("\n[e2b]\ntier = %q\n", tier)})
}

// sdkEnv is what a user of the stock SDKs sets, and the other tenant's key
// the suite tries.
func sdkEnv(s *testserver.Server) []string {
	return append(os.Environ(),
		"E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL, "E2B_API_KEY="+testserver.AlphaE2BKey,
		"CORRAL_E2B_KEY_OTHER="+testserver.BetaE2BKey)
}

// TestStockSDK runs suite.test.js against a server per tier, the two at
// once: the suite mostly waits (on timeouts, pauses, a sandbox's
// server), and each server and node process is its own.
func TestStockSDK(t *testing.T) {
	node := prepare(t)
	for _, tier := range []string{"container", "gvisor"} {
		t.Run(tier, func(t *testing.T) {
			t.Parallel()
			s := server(t, tier)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "--test", "--test-force-exit", "--test-reporter=spec", "suite.test.js")
			cmd.Env = append(sdkEnv(s), "CORRAL_E2B_TIER="+tier)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the stock-SDK suite on %s: %v\n%s", tier, err, out)
			}
			t.Logf("the stock-SDK suite on %s passed in %s:\n%s", tier, time.Since(start).Round(time.Millisecond), summary(out))
		})
	}
}

// TestStockSDKOverHTTPS runs a part of suite.test.js (create, runCode,
// commands.run, kill) against a server that serves https with a local CA,
// which node trusts through NODE_EXTRA_CA_CERTS as a user of a private CA
// would; without it the SDK's first call fails on the certificate.
func TestStockSDKOverHTTPS(t *testing.T) {
	node := prepare(t)
	files := testserver.LocalTLS(t, certtest.NewCA(t), "sandbox.test")
	s := testserver.Start(t, testserver.Options{NoPool: true, TLS: files,
		Extra:  []string{"--image-dir", testenv.ImageDir()},
		Config: "\n[e2b]\ntier = \"container\"\ndomain = \"sandbox.test\"\n"})
	run := func(env ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "--test", "--test-force-exit", "--test-reporter=spec",
			"--test-name-pattern=^runCode keeps state between cells$",
			"--test-name-pattern=^commands.run gives stdout, stderr and the exit code$",
			"--test-name-pattern=^kill$", "suite.test.js")
		cmd.Env = append(sdkEnv(s), append([]string{"E2B_DOMAIN=sandbox.test", "CORRAL_E2B_TIER=container"}, env...)...)
		return cmd.CombinedOutput()
	}
	out, err := run("NODE_EXTRA_CA_CERTS=" + files.CA)
	if err != nil {
		t.Fatalf("the stock SDK over https: %v\n%s", err, out)
	}
	if sum := summary(out); !strings.Contains(sum, "ℹ pass 3") {
		t.Fatalf("the stock SDK over https ran other than the 3 tests chosen:\n%s", out)
	}
	t.Logf("the stock SDK over https:\n%s", summary(out))
	if out, err := run(); err == nil || !strings.Contains(string(out), "unable to verify the first certificate") {
		t.Errorf("without the CA trusted: %v, want a failure naming the certificate\n%s", err, out)
	}
}

// summary is the node test runner's closing counts.
func summary(out []byte) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if regexp.MustCompile(`^ℹ (tests|pass|fail|duration_ms) `).MatchString(l) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestExampleJS runs examples/e2b-js (an agent-style loop on the stock
// SDK) against a server and checks what it prints.
func TestExampleJS(t *testing.T) {
	node := prepare(t)
	s := server(t, "container")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "agent.js")
	cmd.Dir = filepath.Join(testenv.ModuleRoot(t), "examples", "e2b-js")
	cmd.Env = sdkEnv(s)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/e2b-js: %v\n%s", err, out)
	}
	t.Logf("examples/e2b-js:\n%s", out)
	rest := string(out)
	for _, p := range []string{`(?m)^sandbox i[0-9a-f]{19} ready$`, `(?m)^step 1: .*mean = 5\.5`,
		`(?m)^step 2: wrote /workspace/report\.csv`, `(?m)^step 3: report\.csv has 11 lines`,
		`(?m)^step 4: error ZeroDivisionError: float division by zero \(fed back to the model\)`, `(?m)^done, sandbox killed$`} {
		loc := regexp.MustCompile(p).FindStringIndex(rest)
		if loc == nil {
			t.Fatalf("examples/e2b-js: output lacks %q (in order)\n%s", p, out)
		}
		rest = rest[loc[1]:]
	}
}
