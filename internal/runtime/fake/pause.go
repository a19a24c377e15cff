package fake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
)

// Pausing, faked the way gVisor pauses: after EnablePause, a gvisor-tier
// runtime makes PausableSandboxes. Pause suspends the agent and takes the
// control stream from its client; the agent and its processes run on,
// unseen, so their memory holds. Restore gives the same agent a new
// stream and a resumed client (agent.NewResumedClient), as a restore gives
// the restored agent new pipes. The paused agent lives in the runtime, not
// in the directory: a paused sandbox does not outlive its runtime's
// process.

// EnablePause makes a gvisor-tier runtime's next sandboxes
// PausableSandboxes. A container-tier runtime's are never pausable, as
// runc's are not.
func (r *Runtime) EnablePause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pausable = r.tier == runtime.TierGVisor
	if r.paused == nil {
		r.paused = map[string]*Sandbox{}
	}
}

// PausableSandbox is a fake sandbox that is a runtime.Pauser.
type PausableSandbox struct{ *Sandbox }

var (
	_ runtime.Pauser   = PausableSandbox{}
	_ runtime.Restorer = (*Runtime)(nil)
)

const pausedFile = "fake-paused.json"

type pausedSandbox struct {
	Token     string `json:"token"`
	Key       string `json:"key"`
	Workspace string `json:"workspace"`
}

// Pause implements runtime.Pauser.
func (s PausableSandbox) Pause(ctx context.Context, dir string) error {
	if !s.keep {
		return fmt.Errorf("pause fake sandbox %s: %w", s.id, runtime.ErrNotPausable)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		return fmt.Errorf("pause fake sandbox %s: directory %s: %w", s.id, dir, errors.Join(err, fs.ErrExist))
	}
	if err := s.client.Suspend(ctx); err != nil {
		_, rerr := s.client.Resume(context.WithoutCancel(ctx))
		return errors.Join(fmt.Errorf("pause fake sandbox %s: %w", s.id, err), rerr)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	meta, _ := json.Marshal(pausedSandbox{Token: token, Key: runtime.Key(s.rt.tier, s.spec), Workspace: s.spec.Workspace})
	if err := os.WriteFile(filepath.Join(dir, pausedFile), meta, 0o600); err != nil {
		_, rerr := s.client.Resume(context.WithoutCancel(ctx))
		return errors.Join(fmt.Errorf("pause fake sandbox %s: %w", s.id, err), rerr)
	}
	s.paused.Store(true)
	s.link.Detach()
	s.client.Close() // ends only its relay
	s.rt.mu.Lock()
	delete(s.rt.live, s.id)
	s.rt.paused[token] = s.Sandbox
	s.rt.mu.Unlock()
	return nil
}

// Restore implements runtime.Restorer for sandboxes a PausableSandbox's
// Pause left in dir.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, dir string) (runtime.Sandbox, error) {
	b, err := os.ReadFile(filepath.Join(dir, pausedFile))
	if err != nil {
		return nil, fmt.Errorf("restore fake sandbox: %w: %w", runtime.ErrNoImage, err)
	}
	var p pausedSandbox
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("restore fake sandbox: %w: %w", runtime.ErrNoImage, err)
	}
	if p.Workspace != spec.Workspace || p.Key != runtime.Key(r.tier, spec) {
		return nil, fmt.Errorf("restore fake sandbox: paused with another spec: %w", runtime.ErrNoImage)
	}
	r.mu.Lock()
	old := r.paused[p.Token]
	delete(r.paused, p.Token)
	r.mu.Unlock()
	if old == nil {
		return nil, fmt.Errorf("restore fake sandbox: its agent is gone: %w", runtime.ErrNoImage)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, errors.Join(err, old.link.Close())
	}
	s := &Sandbox{rt: r, id: old.id, root: old.root, keep: true, spec: spec, link: old.link}
	s.limits.Store(&spec.Limits)
	s.client = agent.NewResumedClient(s.link.Attach())
	if _, err := s.client.Ready(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("restore fake sandbox: %w", err), s.link.Close())
	}
	r.mu.Lock()
	r.created++
	r.live[s.id] = s
	r.mu.Unlock()
	return PausableSandbox{s}, nil
}

// startLinked starts the sandbox's agent behind a link and waits for it.
func (s *Sandbox) startLinked(ctx context.Context) error {
	l, err := agent.StartLink(s.rt.agent, s.root, s.rt.log)
	if err != nil {
		return err
	}
	s.link = l
	s.client = agent.NewClient(l.Attach())
	if _, err := s.client.Ready(ctx); err != nil {
		return errors.Join(fmt.Errorf("local agent: %w", err), s.stop())
	}
	return nil
}
