package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

// e2bDriver is a node process that calls the stock E2B SDK for the rows
// that measure it (e2b_driver.cjs): a command a line, an answer a line.
type e2bDriver struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	mu  sync.Mutex

	stopped sync.Once
}

// e2bModules is the directory whose node_modules holds the pinned SDKs
// (scripts/npm-deps.sh installs them).
func e2bModules(b *testing.B) string {
	return filepath.Join(testenv.ModuleRoot(b), "test", "e2b")
}

// startE2BDriver starts the driver against srv, or says why it cannot.
func startE2BDriver(b *testing.B, srv *server) (*e2bDriver, error) {
	mods := e2bModules(b)
	if _, err := os.Stat(filepath.Join(mods, "node_modules", "@e2b", "code-interpreter")); err != nil {
		return nil, fmt.Errorf("the pinned E2B SDK is not installed in %s (scripts/npm-deps.sh): %w", mods, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	cmd := exec.Command(node, filepath.Join(testenv.ModuleRoot(b), "bench", "e2b_driver.cjs"))
	cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.url, "E2B_SANDBOX_URL="+srv.url, "E2B_API_KEY="+apiKey,
		"CORRAL_E2B_MODULES="+mods)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the E2B SDK driver: %w", err)
	}
	d := &e2bDriver{cmd: cmd, in: in, out: bufio.NewReader(out)}
	b.Cleanup(d.stop)
	return d, nil
}

// do runs one command of the driver and waits for its answer.
func (d *e2bDriver) do(ctx context.Context, command string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := io.WriteString(d.in, command+"\n"); err != nil {
		return fmt.Errorf("e2b driver %s: %w", command, err)
	}
	line, err := d.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("e2b driver %s: %w", command, err)
	}
	line = strings.TrimSuffix(line, "\n")
	if line != "ok" {
		return fmt.Errorf("e2b driver %s: %s", command, strings.TrimPrefix(line, "error: "))
	}
	return nil
}

// stop ends the driver, once: its main sandbox killed, then the process
// (which ends at the end of its stdin).
func (d *e2bDriver) stop() {
	d.stopped.Do(func() {
		_ = d.do(context.Background(), "close")
		d.in.Close()
		_ = d.cmd.Wait()
	})
}
