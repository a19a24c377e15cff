package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/runtime"
)

// Pausing with memory, on gVisor: runsc checkpoint saves the sentry (every
// task, its memory and open files, the agent among them) to a directory and
// stops the sandbox; runsc restore starts a new sandbox from it. Files the
// tasks had open are found again by path through the new sandbox's mounts,
// which come from the same spec: the Workspace image, attached again, is
// what they refer to.
//
// The agent's control stream is the sandbox's stdin and stdout, host pipes
// that gVisor replaces on restore with those of the restoring runtime: the
// agent reads and writes on as before, now to a new client. The agent is
// suspended before the checkpoint (agent.Client.Suspend), so no frame is
// cut in two, and resumed by the new client (agent.NewResumedClient),
// which learns which processes run.
//
// runc has no checkpoint here (it needs CRIU): its sandboxes are not
// Pausers, and are paused with their files only (runtime.Pauser).

// pausedFile marks a complete saved sandbox in a pause directory and says
// what it needs to be restored; Pause writes it last.
const pausedFile = "corral-paused.json"

type pausedSandbox struct {
	// Key is runtime.Key of the paused sandbox's spec, Workspace its disk
	// image and Fixed its limits that a restore cannot change.
	Key       string `json:"key"`
	Workspace string `json:"workspace"`
	// WorkspaceRel is Workspace relative to the pause directory: a
	// directory moved (or copied to another node, internal/live's
	// snapshots) with the disk beside it is restored from there.
	WorkspaceRel string `json:"workspace_rel,omitempty"`
	// Shape is runtime.Shape of the spec: what a restore where the
	// directory moved to (another node, whose paths differ) checks
	// instead of Key.
	Shape    string         `json:"shape,omitempty"`
	Fixed    runtime.Limits `json:"fixed"`
	PausedAt time.Time      `json:"paused_at"`
}

// checkpointFlags: pages uncompressed (this runsc's default, pinned) in a
// file of their own. flate-best-speed made an idle python sandbox's image
// five times smaller (1.5 against 7.7 MiB) but its pause and restore two to
// four times slower here, and gains nothing on memory that does not
// compress.
var checkpointFlags = []string{"--compression=none"}

// gvisorSandbox is a gVisor sandbox: one that can be paused with its
// memory.
type gvisorSandbox struct {
	*Sandbox
	spec runtime.Spec

	// pausing serialises Pause: a second one must not resume the agent
	// under the first one's checkpoint.
	pausing sync.Mutex
	paused  bool
}

var _ runtime.Pauser = (*gvisorSandbox)(nil)
var _ runtime.Restorer = (*Runtime)(nil)

// wrap returns s as the runtime.Sandbox its tier makes it.
func (r *Runtime) wrap(s *Sandbox, spec runtime.Spec) runtime.Sandbox {
	if r.cfg.Tier == runtime.TierGVisor {
		return &gvisorSandbox{Sandbox: s, spec: spec}
	}
	return s
}

// KeepDisk implements runtime.DiskKeeper: a warm sandbox handed over to a
// live sandbox can then be paused, its disk being the one path names.
func (s *gvisorSandbox) KeepDisk(path string) error {
	s.pausing.Lock()
	defer s.pausing.Unlock()
	if err := s.Sandbox.KeepDisk(path); err != nil {
		return err
	}
	s.spec.Workspace = path
	return nil
}

// Pause implements runtime.Pauser.
func (s *gvisorSandbox) Pause(ctx context.Context, dir string) error {
	s.pausing.Lock()
	defer s.pausing.Unlock()
	if s.paused {
		return fmt.Errorf("pause sandbox %s: paused already: %w", s.id, runtime.ErrNotPausable)
	}
	if !s.keep {
		return fmt.Errorf("pause sandbox %s: it has no workspace image of its own: %w", s.id, runtime.ErrNotPausable)
	}
	workspace, err := filepath.Abs(s.spec.Workspace)
	if err != nil {
		return fmt.Errorf("pause sandbox %s: %w", s.id, err)
	}
	if err := emptyDir(dir); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", s.id, err)
	}
	if err := s.client.Suspend(ctx); err != nil {
		return s.unpause(ctx, dir, fmt.Errorf("pause sandbox %s: %w", s.id, err))
	}
	args := append([]string{"checkpoint", "--image-path", dir}, checkpointFlags...)
	out, err := s.rt.command(ctx, append(args, s.id)...).CombinedOutput()
	if err != nil {
		return s.unpause(ctx, dir, fmt.Errorf("checkpoint sandbox %s: %w: %s", s.id, err, out))
	}
	// The image is made durable before the marker that says it is whole.
	err = syncFiles(dir)
	if err == nil {
		var meta []byte
		p := pausedSandbox{Key: runtime.Key(runtime.TierGVisor, s.spec), Shape: runtime.Shape(runtime.TierGVisor, s.spec), Workspace: workspace,
			Fixed: s.rt.Fixed(*s.limits.Load()), PausedAt: time.Now().UTC()}
		if abs, aerr := filepath.Abs(dir); aerr == nil {
			p.WorkspaceRel, _ = filepath.Rel(abs, workspace)
		}
		meta, err = json.Marshal(p)
		if err == nil {
			err = writeFileSync(filepath.Join(dir, pausedFile), meta)
		}
	}
	// The sandbox has stopped: what is left of it goes, but its disk.
	s.paused = true
	derr := s.Destroy(context.WithoutCancel(ctx))
	if err != nil {
		return errors.Join(fmt.Errorf("pause sandbox %s: %w", s.id, err), derr, removeImage(dir))
	}
	if derr != nil {
		// Saved whole, and stopped: the pause happened. What is left (a
		// loop device a slow teardown still holds) goes by itself.
		s.rt.cfg.Log.Warn("a paused sandbox was saved, but not all of it was removed", "sandbox", s.id, "err", derr)
	}
	return nil
}

// unpause undoes a pause that failed before the sandbox stopped: the agent
// sends again if it can, and what the checkpoint wrote goes.
func (s *gvisorSandbox) unpause(ctx context.Context, dir string, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, rerr := s.client.Resume(rctx); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return errors.Join(err, removeImage(dir))
}

// Restore implements runtime.Restorer for gVisor.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, dir string) (runtime.Sandbox, error) {
	if r.cfg.Tier != runtime.TierGVisor {
		return nil, fmt.Errorf("%w: %s restores no saved sandbox", runtime.ErrUnavailable, r.cfg.Tier)
	}
	if err := r.checkImage(spec, dir); err != nil {
		return nil, err
	}
	s, err := r.create(ctx, spec, dir)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	// The saved state is the sandbox's past now: restoring it again would
	// pair old memory with a changed disk.
	if err := removeImage(dir); err != nil {
		return nil, errors.Join(err, s.Destroy(context.WithoutCancel(ctx)))
	}
	return r.wrap(s, spec), nil
}

// checkImage reads dir's pausedFile and checks that spec can restore it.
func (r *Runtime) checkImage(spec runtime.Spec, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, pausedFile))
	if err != nil {
		return fmt.Errorf("restore from %s: %w: %w", dir, runtime.ErrNoImage, err)
	}
	var p pausedSandbox
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("restore from %s: %w: %w", dir, runtime.ErrNoImage, err)
	}
	workspace, err := filepath.Abs(spec.Workspace)
	// moved: the directory moved with the disk beside it (a snapshot
	// taken up on another node, or elsewhere on this one).
	moved := false
	if abs, aerr := filepath.Abs(dir); aerr == nil && p.WorkspaceRel != "" && workspace != p.Workspace {
		moved = filepath.Join(abs, p.WorkspaceRel) == workspace
	}
	switch {
	case spec.Workspace == "" || err != nil || (workspace != p.Workspace && !moved):
		return fmt.Errorf("restore from %s: paused with workspace %s, not %q: %w", dir, p.Workspace, spec.Workspace, runtime.ErrNoImage)
	case runtime.Key(r.cfg.Tier, spec) != p.Key && !(moved && p.Shape != "" && runtime.Shape(r.cfg.Tier, spec) == p.Shape):
		return fmt.Errorf("restore from %s: paused with another image, mounts or overlays: %w", dir, runtime.ErrNoImage)
	case r.Fixed(spec.Limits) != p.Fixed:
		return fmt.Errorf("restore from %s: paused with fixed limits %+v, not %+v: %w", dir, p.Fixed, r.Fixed(spec.Limits), runtime.ErrNoImage)
	}
	return nil
}

// emptyDir makes dir if it is missing and checks that it is empty: Pause
// owns it.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pause directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read pause directory: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("pause directory %s is not empty: %w", dir, fs.ErrExist)
	}
	return nil
}

// removeImage removes a pause directory and what is in it.
func removeImage(dir string) error {
	// The marker goes first: a directory half removed is no image.
	if err := os.Remove(filepath.Join(dir, pausedFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove saved sandbox: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove saved sandbox: %w", err)
	}
	return nil
}

// writeFileSync writes a file and makes it durable before returning.
func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncFiles flushes every file in dir, and dir, to disk.
func syncFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range append(entries, nil) {
		path := dir
		if e != nil {
			if !e.Type().IsRegular() {
				continue
			}
			path = filepath.Join(dir, e.Name())
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	return nil
}
