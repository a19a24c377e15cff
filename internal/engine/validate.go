package engine

import (
	"strings"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

const (
	minMemoryMB = 16
	minDiskMB   = 16
)

// normalize checks req against the engine's rules and fills defaults. It
// returns the canonical language runner.
func (e *Engine) normalize(req *sandbox.ExecuteRequest) (lang.Runner, error) {
	if req.ExecutionID != "" && !validate.ValidID(req.ExecutionID) {
		return nil, validate.Refuse("execution_id", validate.IDRule)
	}
	if req.SessionID != "" && !validate.ValidID(req.SessionID) {
		return nil, validate.Refuse("session_id", validate.IDRule)
	}
	if req.Language == "" {
		return nil, validate.Refuse("language", "is required; one of %s", strings.Join(lang.Names(), ", "))
	}
	runner, ok := lang.Get(strings.ToLower(req.Language))
	if !ok {
		return nil, validate.Refuse("language", "unknown language %q; one of %s", req.Language, strings.Join(lang.Names(), ", "))
	}
	req.Language = runner.Name()
	if len(req.Code) > e.cfg.MaxCodeBytes {
		return nil, validate.Refuse("code", "is %d bytes; the limit is %d", len(req.Code), e.cfg.MaxCodeBytes)
	}
	if !utf8.ValidString(req.Code) {
		return nil, validate.Refuse("code", "is not valid UTF-8")
	}
	if err := e.normalizeLimits(&req.Limits); err != nil {
		return nil, err
	}
	if err := validate.CheckEnv(req.Env); err != nil {
		return nil, err
	}
	// A bad tier is refused under the name the request gave it.
	tierField := "tier"
	if req.Tier == "" && req.Isolation != "" {
		tierField = "isolation"
	}
	if err := validate.Renamed("tier", &req.Tier, "isolation", &req.Isolation); err != nil {
		return nil, err
	}
	switch req.Tier {
	case "":
		req.Tier = sandbox.TierAuto
	case sandbox.TierAuto, sandbox.TierContainer, sandbox.TierGVisor:
	default:
		return nil, validate.Refuse(tierField, "must be auto, container or gvisor, not %q", req.Tier)
	}
	return runner, nil
}

func (e *Engine) normalizeLimits(l *sandbox.Limits) error {
	d, m := e.cfg.Default, e.cfg.Max
	if l.TimeoutMS < 0 || l.MemoryMB < 0 || l.CPUCores < 0 || l.DiskMB < 0 {
		switch {
		case l.TimeoutMS < 0:
			return validate.Refuse("limits.timeout_ms", "must not be negative")
		case l.MemoryMB < 0:
			return validate.Refuse("limits.memory_mb", "must not be negative")
		case l.CPUCores < 0:
			return validate.Refuse("limits.cpu_cores", "must not be negative")
		default:
			return validate.Refuse("limits.disk_mb", "must not be negative")
		}
	}
	if l.TimeoutMS == 0 {
		l.TimeoutMS = d.TimeoutMS
	}
	if l.MemoryMB == 0 {
		l.MemoryMB = d.MemoryMB
	}
	if l.CPUCores == 0 {
		l.CPUCores = d.CPUCores
	}
	if l.DiskMB == 0 {
		l.DiskMB = d.DiskMB
	}
	switch {
	case l.TimeoutMS > m.TimeoutMS:
		return validate.Refuse("limits.timeout_ms", "%d is above this server's maximum of %d", l.TimeoutMS, m.TimeoutMS)
	case l.MemoryMB > m.MemoryMB:
		return validate.Refuse("limits.memory_mb", "%d is above this server's maximum of %d", l.MemoryMB, m.MemoryMB)
	case l.MemoryMB < minMemoryMB:
		return validate.Refuse("limits.memory_mb", "%d is below the minimum of %d", l.MemoryMB, minMemoryMB)
	case l.CPUCores > m.CPUCores:
		return validate.Refuse("limits.cpu_cores", "%g is above this server's maximum of %g", l.CPUCores, m.CPUCores)
	case l.CPUCores < 0.01:
		return validate.Refuse("limits.cpu_cores", "%g is below the minimum of 0.01", l.CPUCores)
	case l.DiskMB > m.DiskMB:
		return validate.Refuse("limits.disk_mb", "%d is above this server's maximum of %d", l.DiskMB, m.DiskMB)
	case l.DiskMB < minDiskMB:
		return validate.Refuse("limits.disk_mb", "%d is below the minimum of %d", l.DiskMB, minDiskMB)
	}
	return nil
}
