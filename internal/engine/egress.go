package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/runtime"
)

// ProxyAddr is where programs find the egress proxy, inside the sandbox.
const ProxyAddr = "127.0.0.1:3128"

// proxyEnv points HTTP clients at the egress proxy. Local addresses stay
// direct (a server the program starts itself).
var proxyEnv = map[string]string{
	"HTTP_PROXY": "http://" + ProxyAddr, "HTTPS_PROXY": "http://" + ProxyAddr, "ALL_PROXY": "http://" + ProxyAddr,
	"http_proxy": "http://" + ProxyAddr, "https_proxy": "http://" + ProxyAddr, "all_proxy": "http://" + ProxyAddr,
	"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
}

// egress is one execution's proxy: a unix socket in the sandbox's egress
// port (runtime.EgressPort), behind which the proxy enforces the
// execution's allowlist.
type egress struct {
	sock  string
	proxy *netpolicy.Proxy
	done  chan struct{}
}

// startEgress starts the proxy for job in sb's egress port and makes sb's
// agent relay ProxyAddr to it; nil when the job has no network. The port
// is bound into every sandbox at its creation, so a pooled or kept sandbox
// serves an execution with network access as well as one without.
func (e *Engine) startEgress(ctx context.Context, job *Job, sb runtime.Sandbox) (*egress, error) {
	if len(job.Egress) == 0 {
		return nil, nil
	}
	port, ok := sb.(runtime.EgressPort)
	if !ok {
		return nil, errors.New("this runtime's sandboxes have no egress port")
	}
	g, err := e.listenEgress(job, port.EgressDir())
	if err != nil {
		return nil, err
	}
	g.proxy.Observe(auditEgress(audit.From(ctx)))
	if err := g.attach(ctx, sb.Agent()); err != nil {
		g.stop(job)
		return nil, fmt.Errorf("relay to the egress proxy: %w", err)
	}
	return g, nil
}

// listenEgress serves job's proxy on a socket in dir.
func (e *Engine) listenEgress(job *Job, dir string) (*egress, error) {
	sock := filepath.Join(dir, "proxy.sock")
	// A socket left by a run that died with its node's process.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	// Connecting takes write permission on the socket, for the sandbox's
	// user (and gVisor's gofer). Set by chmod after the bind, never by
	// clearing the umask around it: the umask is the whole process's, and
	// every file other goroutines create meanwhile, and every runc or runsc
	// they start, would get it. Until then nobody but root can connect, and
	// the directory is root's: nothing else can take the socket's place.
	if err := os.Chmod(sock, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	g := &egress{sock: sock, proxy: netpolicy.NewProxy(e.cfg.Network, job.Egress), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		if err := g.proxy.Serve(l); err != nil {
			e.log.Warn("egress proxy", "err", err)
		}
	}()
	return g, nil
}

// attach makes the sandbox's agent relay ProxyAddr to the proxy.
func (g *egress) attach(ctx context.Context, c *agent.Client) error {
	err := c.Forward(ctx, ProxyAddr, runtime.EgressPath+"/proxy.sock")
	var re *agent.RemoteError
	if errors.As(err, &re) && errors.Is(re, syscall.EADDRINUSE) {
		return nil // a sandbox that served before relays already
	}
	return err
}

// stop ends the proxy and reports its attempts.
func (g *egress) stop(job *Job) {
	if g == nil {
		return
	}
	attempts := g.proxy.Close()
	<-g.done
	os.Remove(g.sock)
	if job.Audit != nil {
		job.Audit(attempts)
	}
}

// auditEgress records each attempt in scope: allowed or denied with its
// host and port, and each secret header injected into it.
func auditEgress(scope audit.Scope) func(netpolicy.Attempt) {
	return func(a netpolicy.Attempt) {
		action, outcome := audit.EgressAllowed, audit.OK
		if !a.Allowed {
			action, outcome = audit.EgressDenied, audit.Denied
		}
		f := map[string]string{"host": a.Host, "port": strconv.Itoa(a.Port), "method": a.Method,
			"bytes_up": strconv.FormatInt(a.BytesUp, 10), "bytes_down": strconv.FormatInt(a.BytesDown, 10)}
		if a.Address != "" {
			f["address"] = a.Address
		}
		if a.Status != 0 {
			f["status"] = strconv.Itoa(a.Status)
		}
		scope.Record(audit.Event{Time: a.Time, Action: action, Outcome: outcome, Error: a.Reason, Fields: f})
		for _, h := range a.Injected {
			scope.Record(audit.Event{Time: a.Time, Action: audit.SecretInjected,
				Fields: map[string]string{"name": h, "host": a.Host, "port": strconv.Itoa(a.Port)}})
		}
	}
}

// ProxyEnv returns the variables that point a program's HTTP clients at
// the egress proxy.
func ProxyEnv() map[string]string { return maps.Clone(proxyEnv) }

// SandboxEgress starts a proxy for allow (an allowlist Prepare narrowed,
// Job.Egress) in sb's egress port, for the sandbox's whole life rather
// than one execution's: a live sandbox's, whose processes reach the
// network through it (with ProxyEnv). stop ends it.
func (e *Engine) SandboxEgress(ctx context.Context, allow []string, sb runtime.Sandbox) (stop func(), err error) {
	job := &Job{Placement: Placement{Egress: allow}}
	g, err := e.startEgress(ctx, job, sb)
	if err != nil || g == nil {
		return func() {}, err
	}
	return func() { g.stop(job) }, nil
}
