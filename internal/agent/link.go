package agent

import (
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"
)

// Link is the host's end of a local agent's control stream (ServeLocal,
// `agent local ROOT`) whose client can be replaced while the agent runs
// on, as a restore from a checkpoint replaces the host's stream: the
// agent's stdin and stdout, relayed to the client of the moment. A client
// closing its stream ends only its relay; the agent ends with Close. The
// fake runtime's pausable sandboxes and the tests of resuming clients use
// it.
type Link struct {
	cmd *exec.Cmd
	in  io.WriteCloser // the agent's stdin
	out io.ReadCloser  // the agent's stdout

	mu sync.Mutex
	to *io.PipeWriter // the current client's reading end; nil while detached

	closeOnce sync.Once
	closeErr  error
}

// StartLink starts binary as a local agent on root (`binary local root`),
// its stderr to stderr, with no client until Attach.
func StartLink(binary, root string, stderr io.Writer) (*Link, error) {
	cmd := exec.Command(binary, "local", root)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("agent stdin: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("agent stdout: %w", err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agent: %w", err)
	}
	l := &Link{cmd: cmd, in: in, out: out}
	go l.relay()
	return l, nil
}

// relay copies the agent's frames to the current client. While detached
// the agent is suspended and sends nothing.
func (l *Link) relay() {
	buf := make([]byte, 64<<10)
	for {
		n, err := l.out.Read(buf)
		l.mu.Lock()
		to := l.to
		l.mu.Unlock()
		if to == nil {
			continue
		}
		// Not under mu: a client that stopped reading must not block
		// Detach, which closes its end.
		if n > 0 {
			_, _ = to.Write(buf[:n])
		}
		if err != nil {
			to.CloseWithError(err)
			return
		}
	}
}

// Attach gives the agent a new client stream, ending the previous one (its
// client reads EOF, as the host does when a checkpointed sandbox stops),
// and returns the new stream's ends for NewClient or NewResumedClient.
func (l *Link) Attach() (io.Reader, io.Writer, io.Closer) {
	fromAgent, toClient := io.Pipe()
	fromClient, toAgent := io.Pipe()
	l.mu.Lock()
	if l.to != nil {
		l.to.Close()
	}
	l.to = toClient
	l.mu.Unlock()
	go func() {
		// What the client sends reaches the agent; the client's Close
		// ends only this copy, never the agent's stdin.
		_, _ = io.Copy(l.in, fromClient)
		fromClient.Close()
	}()
	return fromAgent, toAgent, toAgent
}

// Detach ends the current client's stream: it sees the agent lost.
func (l *Link) Detach() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.to != nil {
		l.to.Close()
		l.to = nil
	}
}

// Close ends the agent (it kills every process it started) and waits for
// it; one that does not exit within a few seconds is killed.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.Detach()
		l.in.Close()
		done := make(chan error, 1)
		go func() { done <- l.cmd.Wait() }()
		select {
		case l.closeErr = <-done:
		case <-time.After(5 * time.Second):
			l.cmd.Process.Kill()
			l.closeErr = <-done
		}
	})
	return l.closeErr
}
