package engine

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/sandbox"
)

// InputError is a request the engine refuses: Field names what is wrong
// (e.g. "limits.memory_mb") so a client or a model can fix it.
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func inputErr(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Message: fmt.Sprintf(format, args...)}
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// ValidID reports whether s is acceptable as an execution or session id.
func ValidID(s string) bool { return idPattern.MatchString(s) }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// reservedEnv are names the sandbox sets for isolation and reproducibility;
// a request cannot override them.
var reservedEnv = map[string]bool{
	"PATH": true, "HOME": true, "TZ": true, "LANG": true, "LC_ALL": true,
	"PYTHONHASHSEED": true, "TMPDIR": true, "USER": true, "LOGNAME": true,
	"HOSTNAME": true, "PWD": true, "SHELL": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
}

const (
	maxEnvVars  = 128
	maxEnvBytes = 64 << 10
	minMemoryMB = 16
	minDiskMB   = 16
)

// normalize checks req against the engine's rules and fills defaults. It
// returns the canonical language runner.
func (e *Engine) normalize(req *sandbox.ExecuteRequest) (lang.Runner, error) {
	if req.ExecutionID != "" && !ValidID(req.ExecutionID) {
		return nil, inputErr("execution_id", "must be 1-128 characters of letters, digits and . _ : - starting with a letter or digit")
	}
	if req.SessionID != "" && !ValidID(req.SessionID) {
		return nil, inputErr("session_id", "must be 1-128 characters of letters, digits and . _ : - starting with a letter or digit")
	}
	if req.Language == "" {
		return nil, inputErr("language", "is required; one of %s", strings.Join(lang.Names(), ", "))
	}
	runner, ok := lang.Get(strings.ToLower(req.Language))
	if !ok {
		return nil, inputErr("language", "unknown language %q; one of %s", req.Language, strings.Join(lang.Names(), ", "))
	}
	req.Language = runner.Name()
	if len(req.Code) > e.cfg.MaxCodeBytes {
		return nil, inputErr("code", "is %d bytes; the limit is %d", len(req.Code), e.cfg.MaxCodeBytes)
	}
	if !utf8.ValidString(req.Code) {
		return nil, inputErr("code", "is not valid UTF-8")
	}
	if err := e.normalizeLimits(&req.Limits); err != nil {
		return nil, err
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, err
	}
	switch req.Isolation {
	case "":
		req.Isolation = sandbox.IsolationAuto
	case sandbox.IsolationAuto, sandbox.IsolationContainer, sandbox.IsolationGVisor:
	default:
		return nil, inputErr("isolation", "must be auto, container or gvisor, not %q", req.Isolation)
	}
	return runner, nil
}

func (e *Engine) normalizeLimits(l *sandbox.Limits) error {
	d, m := e.cfg.Default, e.cfg.Max
	if l.TimeoutMS < 0 || l.MemoryMB < 0 || l.CPUCores < 0 || l.DiskMB < 0 {
		switch {
		case l.TimeoutMS < 0:
			return inputErr("limits.timeout_ms", "must not be negative")
		case l.MemoryMB < 0:
			return inputErr("limits.memory_mb", "must not be negative")
		case l.CPUCores < 0:
			return inputErr("limits.cpu_cores", "must not be negative")
		default:
			return inputErr("limits.disk_mb", "must not be negative")
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
		return inputErr("limits.timeout_ms", "%d is above this server's maximum of %d", l.TimeoutMS, m.TimeoutMS)
	case l.MemoryMB > m.MemoryMB:
		return inputErr("limits.memory_mb", "%d is above this server's maximum of %d", l.MemoryMB, m.MemoryMB)
	case l.MemoryMB < minMemoryMB:
		return inputErr("limits.memory_mb", "%d is below the minimum of %d", l.MemoryMB, minMemoryMB)
	case l.CPUCores > m.CPUCores:
		return inputErr("limits.cpu_cores", "%g is above this server's maximum of %g", l.CPUCores, m.CPUCores)
	case l.CPUCores < 0.01:
		return inputErr("limits.cpu_cores", "%g is below the minimum of 0.01", l.CPUCores)
	case l.DiskMB > m.DiskMB:
		return inputErr("limits.disk_mb", "%d is above this server's maximum of %d", l.DiskMB, m.DiskMB)
	case l.DiskMB < minDiskMB:
		return inputErr("limits.disk_mb", "%d is below the minimum of %d", l.DiskMB, minDiskMB)
	}
	return nil
}

func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return inputErr("env", "has %d variables; the limit is %d", len(env), maxEnvVars)
	}
	total := 0
	for k, v := range env {
		field := "env." + k
		if !envName.MatchString(k) {
			return inputErr("env", "%q is not a valid variable name", k)
		}
		if reservedEnv[k] || strings.HasPrefix(k, "CORRAL_") {
			return inputErr(field, "is set by the sandbox and cannot be overridden")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return inputErr(field, "contains a NUL byte")
		}
		if !utf8.ValidString(v) {
			return inputErr(field, "is not valid UTF-8")
		}
		total += len(k) + len(v) + 2
	}
	if total > maxEnvBytes {
		return inputErr("env", "is %d bytes; the limit is %d", total, maxEnvBytes)
	}
	return nil
}

// CheckEnv checks variables a client gives a program (an *InputError
// names the one at fault, under "env").
func CheckEnv(env map[string]string) error { return checkEnv(env) }
