package validate

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

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
)

// CheckEnv checks variables a client gives a program: an *InputError
// names the one at fault, under "env".
func CheckEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return Refuse("env", "has %d variables; the limit is %d", len(env), maxEnvVars)
	}
	total := 0
	for k, v := range env {
		field := "env." + k
		if !envName.MatchString(k) {
			return Refuse("env", "%q is not a valid variable name", k)
		}
		if reservedEnv[k] || strings.HasPrefix(k, "CORRAL_") {
			return Refuse(field, "is set by the sandbox and cannot be overridden")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Refuse(field, "contains a NUL byte")
		}
		if !utf8.ValidString(v) {
			return Refuse(field, "is not valid UTF-8")
		}
		total += len(k) + len(v) + 2
	}
	if total > maxEnvBytes {
		return Refuse("env", "is %d bytes; the limit is %d", total, maxEnvBytes)
	}
	return nil
}
