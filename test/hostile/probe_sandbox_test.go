package hostile

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// probe is a python program that inspects the sandbox from inside and
// prints its findings as JSON.
const probe = `
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return line.split(':', 1)[1].strip()
out['CapEff'] = status('CapEff')
out['CapPrm'] = status('CapPrm')
out['NoNewPrivs'] = status('NoNewPrivs')
out['Seccomp'] = status('Seccomp')
out['uid'] = os.getuid()
out['euid'] = os.geteuid()
out['shadow_exists'] = os.path.exists('/etc/shadow')
try:
    out['init_environ'] = open('/proc/1/environ', 'rb').read().decode('utf-8', 'replace')
except OSError as e:
    out['init_environ'] = 'refused: ' + errno.errorcode[e.errno]
out['own_environ'] = '\n'.join(k + '=' + v for k, v in os.environ.items())
out['interfaces'] = sorted(name for _, name in socket.if_nameindex())
def sys(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return 'ok' if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
# x86_64 syscall numbers
out['mount'] = sys(165, 0, 0, 0, 0, 0)
out['unshare'] = sys(272, 0x00020000)         # CLONE_NEWNS
out['unshare_user'] = sys(272, 0x10000000)    # CLONE_NEWUSER
out['bpf'] = sys(321, 0, 0, 0)
out['keyctl'] = sys(250, 0, 0, 0, 0, 0)
out['add_key'] = sys(248, 0, 0, 0, 0, 0)
out['io_uring_setup'] = sys(425, 8, 0)
out['userfaultfd'] = sys(323, 0)
out['ptrace'] = sys(101, 0, 0, 0, 0)          # PTRACE_TRACEME
out['perf_event_open'] = sys(298, 0, 0, -1, -1, 0)
out['setns'] = sys(308, 0, 0)
out['pivot_root'] = sys(155, 0, 0)
writes = {}
for path in ['/x', '/etc/x', '/usr/x', '/usr/bin/x', '/bin/x', '/root/x', '/var/x', '/home/x', '/dev/x', '/proc/x', '/sys/x', '/.corral/x', '/.corral/agent', '/etc/passwd']:
    try:
        with open(path, 'a') as f:
            f.write('x')
        writes[path] = 'ok'
    except OSError as e:
        writes[path] = errno.errorcode[e.errno]
for path in ['/workspace/x', '/tmp/x']:
    with open(path, 'w') as f:
        f.write('x')
    writes[path] = 'ok'
out['writes'] = writes
print(json.dumps(out))
`

type findings struct {
	CapEff, CapPrm, NoNewPrivs, Seccomp string
	UID                                 int               `json:"uid"`
	EUID                                int               `json:"euid"`
	ShadowExists                        bool              `json:"shadow_exists"`
	InitEnviron                         string            `json:"init_environ"`
	OwnEnviron                          string            `json:"own_environ"`
	Interfaces                          []string          `json:"interfaces"`
	Writes                              map[string]string `json:"writes"`
	Syscalls                            map[string]string `json:"-"`
}

var deniedSyscalls = []string{"mount", "unshare", "unshare_user", "bpf", "keyctl", "add_key", "io_uring_setup",
	"userfaultfd", "ptrace", "perf_event_open", "setns", "pivot_root"}

// TestIsolationFromInside checks, from a program in the sandbox, what docs/ARCHITECTURE.md ("The sandbox")
// and the execution-core issue promise: no host secrets, no capabilities,
// no new privileges, seccomp on, unprivileged uid, loopback only, the
// dangerous syscalls refused, writable /workspace and /tmp only.
func TestIsolationFromInside(t *testing.T) {
	e := testenv.Engine(t)
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			t.Parallel()
			res := run(t, e, sandbox.ExecuteRequest{Language: "python", Code: probe, Isolation: tier})
			if res.Status != sandbox.StatusSuccess {
				t.Fatalf("probe failed: %+v\n%s", res.Error, res.Stderr)
			}
			var f findings
			if err := json.Unmarshal([]byte(res.Stdout), &f); err != nil {
				t.Fatalf("probe output %q: %v", res.Stdout, err)
			}
			var raw map[string]any
			_ = json.Unmarshal([]byte(res.Stdout), &raw)
			if f.CapEff != "0000000000000000" || f.CapPrm != "0000000000000000" {
				t.Errorf("CapEff %s CapPrm %s, want 0", f.CapEff, f.CapPrm)
			}
			if f.NoNewPrivs != "1" {
				t.Errorf("NoNewPrivs = %s", f.NoNewPrivs)
			}
			if f.Seccomp != "2" {
				t.Errorf("Seccomp = %s, want 2 (filter)", f.Seccomp)
			}
			if f.UID == 0 || f.EUID == 0 {
				t.Errorf("uid %d euid %d", f.UID, f.EUID)
			}
			if f.ShadowExists {
				t.Error("/etc/shadow is visible")
			}
			for name, env := range map[string]string{"/proc/1/environ": f.InitEnviron, "own environment": f.OwnEnviron} {
				if strings.Contains(env, canary) {
					t.Errorf("%s holds the host's canary: %q", name, env)
				}
				for _, hostVar := range []string{"GOPATH=", "GOCACHE=", "PWD=/", "SSH_", "CORRAL_"} {
					if strings.Contains(env, hostVar) {
						t.Errorf("%s holds a host variable %s: %q", name, hostVar, env)
					}
				}
			}
			if len(f.Interfaces) != 1 || f.Interfaces[0] != "lo" {
				t.Errorf("interfaces %v, want only lo", f.Interfaces)
			}
			for _, name := range deniedSyscalls {
				got, _ := raw[name].(string)
				if got != "EPERM" && got != "ENOSYS" {
					t.Errorf("%s: %s, want EPERM or ENOSYS", name, got)
				}
			}
			// The loop below checks only what was reported.
			if f.Writes["/workspace/x"] != "ok" || f.Writes["/tmp/x"] != "ok" || f.Writes["/etc/passwd"] == "" {
				t.Errorf("the probe's writes are not all reported: %v", f.Writes)
			}
			for path, got := range f.Writes {
				want := path == "/workspace/x" || path == "/tmp/x"
				if (got == "ok") != want {
					t.Errorf("write %s: %s", path, got)
				}
			}
		})
	}
}
