package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/oci"
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

// egress is one execution's proxy: a unix socket on the host, bound into
// the sandbox, behind which the proxy enforces the execution's allowlist.
type egress struct {
	dir   string
	proxy *netpolicy.Proxy
	done  chan struct{}
}

// startEgress starts the proxy for job and returns the mount that exposes
// it, or nil when the job has no network.
func (e *Engine) startEgress(job *Job) (*egress, *runtime.Mount, error) {
	if len(job.Egress) == 0 {
		return nil, nil, nil
	}
	// MkdirTemp makes the directory 0700: until the socket in it has its
	// final mode, nobody but us can reach it, or put something else in its
	// place.
	dir, err := os.MkdirTemp(e.scratch, "egress-")
	if err != nil {
		return nil, nil, fmt.Errorf("egress dir: %w", err)
	}
	sock := filepath.Join(dir, "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("egress socket: %w", err)
	}
	// Connecting takes write permission on the socket, for the sandbox's
	// user (and gVisor's gofer). Set by chmod after the bind, never by
	// clearing the umask around it: the umask is the whole process's, and
	// every file other goroutines create meanwhile, and every runc or runsc
	// they start, would get it.
	if err := os.Chmod(sock, 0o666); err != nil {
		l.Close()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("egress socket: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		l.Close()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("egress dir: %w", err)
	}
	g := &egress{dir: dir, proxy: netpolicy.NewProxy(e.cfg.Network, job.Egress), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		if err := g.proxy.Serve(l); err != nil {
			e.log.Warn("egress proxy", "err", err)
		}
	}()
	return g, &runtime.Mount{Source: dir, Destination: oci.RunPath + "/egress"}, nil
}

// attach makes the sandbox's agent relay ProxyAddr to the proxy.
func (g *egress) attach(ctx context.Context, c *agent.Client) error {
	err := c.Forward(ctx, ProxyAddr, oci.RunPath+"/egress/proxy.sock")
	var re *agent.RemoteError
	if errors.As(err, &re) && strings.Contains(re.Message, "address already in use") {
		return nil // a kept sandbox relays already
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
	os.RemoveAll(g.dir)
	if job.Audit != nil {
		job.Audit(attempts)
	}
}
