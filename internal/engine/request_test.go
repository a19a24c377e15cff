package engine_test

import (
	"errors"
	"testing"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// TestPrepareSandboxNames: a refusal names the field as the caller's
// request spelled it (Names), whoever asks; without Names, the field's
// own name.
func TestPrepareSandboxNames(t *testing.T) {
	e := tiersEngine(t, "absent")
	max := e.Config().Max
	cases := []struct {
		name  string
		req   engine.SandboxRequest
		field string
	}{
		{"cpu_cores", engine.SandboxRequest{Language: "bash", Limits: engine.Limits{CPUCores: max.CPUCores + 1}}, "limits.cpu_cores"},
		{"cpus", engine.SandboxRequest{Language: "bash", Limits: engine.Limits{CPUCores: max.CPUCores + 1},
			Names: engine.Names{CPUCores: "limits.cpus"}}, "limits.cpus"},
		{"cpus below", engine.SandboxRequest{Language: "bash", Limits: engine.Limits{CPUCores: 0.001},
			Names: engine.Names{CPUCores: "limits.cpus"}}, "limits.cpus"},
		{"negative cpus", engine.SandboxRequest{Language: "bash", Limits: engine.Limits{CPUCores: -1},
			Names: engine.Names{CPUCores: "limits.cpus"}}, "limits.cpus"},
		{"tier", engine.SandboxRequest{Language: "bash", Tier: "vm"}, "tier"},
		{"isolation", engine.SandboxRequest{Language: "bash", Tier: "vm", Names: engine.Names{Tier: "isolation"}}, "isolation"},
		{"isolation missing", engine.SandboxRequest{Language: "bash", Tier: sandbox.TierGVisor, Names: engine.Names{Tier: "isolation"}}, "isolation"},
		{"memory", engine.SandboxRequest{Language: "bash", Limits: engine.Limits{MemoryMB: max.MemoryMB + 1}}, "limits.memory_mb"},
		{"negative memory", engine.SandboxRequest{Language: "bash", Limits: engine.Limits{MemoryMB: -1}}, "limits.memory_mb"},
		{"language", engine.SandboxRequest{}, "language"},
		{"env", engine.SandboxRequest{Language: "bash", Env: map[string]string{"HOME": "/"}}, "env.HOME"},
		{"no network here", engine.SandboxRequest{Language: "bash", Network: &sandbox.Network{}}, "network.allow"},
		{"image", engine.SandboxRequest{Language: "bash", Image: "missing"}, "image"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := e.PrepareSandbox(c.req); !isRefusalOf(err, c.field) {
				t.Errorf("PrepareSandbox = %v; want a refusal of %s", err, c.field)
			}
		})
	}
}

// TestPrepareSandbox: what a live sandbox asks (no code, its own disk and
// process limits) is filled in and routed; its disk and processes are the
// asker's to bound, its memory and CPU the engine's.
func TestPrepareSandbox(t *testing.T) {
	e := tiersEngine(t, "available", func(c *engine.Config) { c.Network.Allow = []string{"*.example.com"} })
	cfg := e.Config()
	p, err := e.PrepareSandbox(engine.SandboxRequest{Tenant: "t", Language: "Bash",
		Limits:  engine.Limits{DiskMB: 2 * cfg.Max.DiskMB, Pids: 4 * cfg.Pids},
		Network: &sandbox.Network{Allow: []string{"api.example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Limits{MemoryMB: cfg.Default.MemoryMB, CPUCores: cfg.Default.CPUCores, DiskMB: 2 * cfg.Max.DiskMB, Pids: 4 * cfg.Pids}
	if p.Runner.Name() != "bash" || p.Limits != want || p.Tenant != "t" || len(p.Egress) != 1 || p.Egress[0] != "api.example.com" {
		t.Errorf("placement %+v, want bash, limits %+v, tenant t, egress api.example.com", p, want)
	}
	if p.Tier != runtime.TierContainer || p.TierReason != "auto: no risky constructs" {
		t.Errorf("routed to %s (%q), want container: a sandbox with no code has no risk", p.Tier, p.TierReason)
	}
	spec := runtime.Spec{Rootfs: "/r"}
	if c := p.Claim(spec); c.Tier != p.Tier || c.Tenant != "t" || c.Image.Name != p.Image.Name || c.Spec.Rootfs != "/r" {
		t.Errorf("claim %+v", c)
	}
	d, err := e.PrepareSandbox(engine.SandboxRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Limits.DiskMB != cfg.Default.DiskMB || d.Limits.Pids != cfg.Pids {
		t.Errorf("defaults %+v, want disk %d, pids %d", d.Limits, cfg.Default.DiskMB, cfg.Pids)
	}
	if _, err := e.PrepareSandbox(engine.SandboxRequest{Language: "python", Network: &sandbox.Network{Allow: []string{"a.example.com", "b.example.org"}}}); !isRefusalOf(err, "network.allow[1]") {
		t.Errorf("an allowlist wider than the server's: %v, want a refusal of network.allow[1]", err)
	}
}

func isRefusalOf(err error, field string) bool {
	var ie *validate.InputError
	return errors.As(err, &ie) && ie.Field == field
}

// TestWarmSpec: what a warm pool keeps ready has the server's default
// limits, for a language's default image.
func TestWarmSpec(t *testing.T) {
	e := tiersEngine(t, "absent")
	cfg := e.Config()
	spec, img, err := e.WarmSpec(t.Context(), runtime.TierContainer, "bash", "", false)
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.Limits{MemoryBytes: cfg.Default.MemoryMB << 20, CPUCores: cfg.Default.CPUCores, Pids: cfg.Pids, DiskBytes: cfg.Default.DiskMB << 20}
	if spec.Limits != want || spec.Rootfs != img.Rootfs || img.Name == "" {
		t.Errorf("spec %+v of image %+v; want limits %+v", spec, img, want)
	}
	if _, _, err := e.WarmSpec(t.Context(), runtime.TierGVisor, "bash", "", false); err == nil {
		t.Error("a warm spec on a tier this server lacks")
	}
	if _, _, err := e.WarmSpec(t.Context(), runtime.TierContainer, "cobol", "", false); err == nil {
		t.Error("a warm spec for an unknown language")
	}
}
