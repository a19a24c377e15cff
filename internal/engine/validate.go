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

// checkExecution checks what req asks beyond its sandbox (its ids, its
// code, its timeout and disk) and fills the defaults of those; it takes
// the tier's old name into the new one and returns the name the request
// gave it.
func (e *Engine) checkExecution(req *sandbox.ExecuteRequest) (tierField string, err error) {
	if req.ExecutionID != "" && !validate.ValidID(req.ExecutionID) {
		return "", validate.Refuse("execution_id", validate.IDRule)
	}
	if req.SessionID != "" && !validate.ValidID(req.SessionID) {
		return "", validate.Refuse("session_id", validate.IDRule)
	}
	if len(req.Code) > e.cfg.MaxCodeBytes {
		return "", validate.Refuse("code", "is %d bytes; the limit is %d", len(req.Code), e.cfg.MaxCodeBytes)
	}
	if !utf8.ValidString(req.Code) {
		return "", validate.Refuse("code", "is not valid UTF-8")
	}
	l, d, m := &req.Limits, e.cfg.Default, e.cfg.Max
	if l.TimeoutMS == 0 {
		l.TimeoutMS = d.TimeoutMS
	}
	if l.DiskMB == 0 {
		l.DiskMB = d.DiskMB
	}
	switch {
	case l.TimeoutMS < 0:
		return "", validate.Refuse("limits.timeout_ms", "must not be negative")
	case l.TimeoutMS > m.TimeoutMS:
		return "", validate.Refuse("limits.timeout_ms", "%d is above this server's maximum of %d", l.TimeoutMS, m.TimeoutMS)
	case l.DiskMB < 0:
		return "", validate.Refuse("limits.disk_mb", "must not be negative")
	case l.DiskMB > m.DiskMB:
		return "", validate.Refuse("limits.disk_mb", "%d is above this server's maximum of %d", l.DiskMB, m.DiskMB)
	case l.DiskMB < minDiskMB:
		return "", validate.Refuse("limits.disk_mb", "%d is below the minimum of %d", l.DiskMB, minDiskMB)
	}
	return validate.Renamed("tier", &req.Tier, "isolation", &req.Isolation)
}

// checkSandbox checks r against the engine's rules and fills its
// defaults, naming a field at fault as r.Names says. It returns the
// canonical language runner.
func (e *Engine) checkSandbox(r *SandboxRequest) (lang.Runner, error) {
	if r.Language == "" {
		return nil, validate.Refuse("language", "is required; one of %s", strings.Join(lang.Names(), ", "))
	}
	runner, ok := lang.Get(strings.ToLower(r.Language))
	if !ok {
		return nil, validate.Refuse("language", "unknown language %q; one of %s", r.Language, strings.Join(lang.Names(), ", "))
	}
	r.Language = runner.Name()
	if err := e.checkLimits(&r.Limits, r.Names); err != nil {
		return nil, err
	}
	if err := validate.CheckEnv(r.Env); err != nil {
		return nil, err
	}
	switch r.Tier {
	case "":
		r.Tier = sandbox.TierAuto
	case sandbox.TierAuto, sandbox.TierContainer, sandbox.TierGVisor:
	default:
		return nil, validate.Refuse(r.Names.tier(), "must be auto, container or gvisor, not %q", r.Tier)
	}
	return runner, nil
}

// checkLimits bounds memory and CPU by the server's limits and fills
// every default (see Limits).
func (e *Engine) checkLimits(l *Limits, names Names) error {
	d, m := e.cfg.Default, e.cfg.Max
	if l.MemoryMB == 0 {
		l.MemoryMB = d.MemoryMB
	}
	if l.CPUCores == 0 {
		l.CPUCores = d.CPUCores
	}
	if l.DiskMB == 0 {
		l.DiskMB = d.DiskMB
	}
	if l.Pids == 0 {
		l.Pids = e.cfg.Pids
	}
	switch cpu := names.cpuCores(); {
	case l.MemoryMB < 0:
		return validate.Refuse("limits.memory_mb", "must not be negative")
	case l.MemoryMB > m.MemoryMB:
		return validate.Refuse("limits.memory_mb", "%d is above this server's maximum of %d", l.MemoryMB, m.MemoryMB)
	case l.MemoryMB < minMemoryMB:
		return validate.Refuse("limits.memory_mb", "%d is below the minimum of %d", l.MemoryMB, minMemoryMB)
	case l.CPUCores < 0:
		return validate.Refuse(cpu, "must not be negative")
	case l.CPUCores > m.CPUCores:
		return validate.Refuse(cpu, "%g is above this server's maximum of %g", l.CPUCores, m.CPUCores)
	case l.CPUCores < 0.01:
		return validate.Refuse(cpu, "%g is below the minimum of 0.01", l.CPUCores)
	}
	return nil
}
