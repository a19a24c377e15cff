// Package systemd checks deploy/systemd: the unit passes `systemd-analyze
// verify` with nothing to say, against a root holding the binary it runs;
// its stop timeout covers the drain; and the example configuration and
// environment pass the unit's own ExecStartPre (corral config check).
package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func unitDir(t *testing.T) string {
	return filepath.Join(testenv.ModuleRoot(t), "deploy", "systemd")
}

// verify runs systemd-analyze verify on unit as installed in a scratch root
// with the corral binary its commands name and systemd's own units (which
// it depends on); any message is a failure, since verify exits 0 on
// settings it ignores.
func verify(t *testing.T, unit []byte) string {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	testenv.Need(t, err == nil, "systemd-analyze not installed (Debian package systemd; scripts/deps.sh test)")
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copy systemd's units: %v: %s", err, out)
	}
	// A copy: verify resolves links inside the root.
	if out, err := exec.Command("cp", testenv.Corral(t), filepath.Join(root, "usr/local/bin/corral")).CombinedOutput(); err != nil {
		t.Fatalf("copy corral: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/systemd/system/corral.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--root="+root, "corral.service").CombinedOutput()
	if err != nil && len(out) == 0 {
		return err.Error()
	}
	return strings.TrimSpace(string(out))
}

func TestUnitVerifies(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(unitDir(t), "corral.service"))
	if err != nil {
		t.Fatal(err)
	}
	if msg := verify(t, unit); msg != "" {
		t.Errorf("systemd-analyze verify corral.service:\n%s", msg)
	}
	// The check itself sees a broken unit.
	broken := strings.Replace(string(unit), "\nKillMode=mixed\n", "\nKillMode=mixd\n", 1)
	if msg := verify(t, []byte(broken)); !strings.Contains(msg, "mixd") {
		t.Errorf("a misspelt KillMode went unnoticed: %q", msg)
	}
}

// settings reads the unit's [Service] settings (the last value of each).
func settings(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(unitDir(t), "corral.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = l
		case section == "[Service]":
			k, v, _ := strings.Cut(l, "=")
			if k == "Environment" {
				k, v, _ = strings.Cut(v, "=")
			}
			out[k] = v
		}
	}
	return out
}

func TestUnitDrainsAndTearsDown(t *testing.T) {
	s := settings(t)
	drain, err := time.ParseDuration(s["CORRAL_DRAIN_TIMEOUT"])
	if err != nil {
		t.Fatalf("CORRAL_DRAIN_TIMEOUT %q: %v", s["CORRAL_DRAIN_TIMEOUT"], err)
	}
	stop, err := strconv.Atoi(s["TimeoutStopSec"])
	if err != nil {
		t.Fatalf("TimeoutStopSec %q: %v", s["TimeoutStopSec"], err)
	}
	if margin := time.Duration(stop)*time.Second - drain; margin < 15*time.Second {
		t.Errorf("TimeoutStopSec %ds leaves %s after a %s drain for the sandboxes' teardown", stop, margin, drain)
	}
	for k, want := range map[string]string{"KillMode": "mixed", "KillSignal": "SIGTERM", "Delegate": "yes", "Type": "exec"} {
		if s[k] != want {
			t.Errorf("%s=%s, want %s", k, s[k], want)
		}
	}
	for _, k := range []string{"PrivateDevices", "ProtectControlGroups", "ProtectKernelTunables", "RestrictNamespaces",
		"NoNewPrivileges", "SystemCallFilter", "DeviceAllow", "PrivateNetwork", "PrivateUsers"} {
		if _, set := s[k]; set {
			t.Errorf("%s is set: it breaks sandboxes (see the unit's comment)", k)
		}
	}
}

// TestExampleConfig runs the unit's ExecStartPre on the example files.
func TestExampleConfig(t *testing.T) {
	dir := unitDir(t)
	s := settings(t)
	pre := strings.Fields(s["ExecStartPre"])
	if len(pre) < 3 || pre[0] != "/usr/local/bin/corral" || pre[1] != "config" || pre[2] != "check" {
		t.Fatalf("ExecStartPre %q is not corral config check", s["ExecStartPre"])
	}
	env := []string{"PATH=/usr/bin:/bin", "CORRAL_DRAIN_TIMEOUT=" + s["CORRAL_DRAIN_TIMEOUT"]}
	b, err := os.ReadFile(filepath.Join(dir, "corral.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			env = append(env, l)
		}
	}
	args := append([]string{}, pre[1:]...)
	args[len(args)-1] = filepath.Join(dir, "corral.toml") // --config /etc/corral/corral.toml
	cmd := exec.Command(testenv.Corral(t), args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("corral %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, want := range []string{"store postgres", "state redis", "blob s3", "1 tenant(s)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("config check said %q, want %q in it", out, want)
		}
	}
}
