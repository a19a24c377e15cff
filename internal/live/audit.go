package live

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/sandbox"
)

// The audit trail (internal/audit) of live sandboxes: each call of the
// process, file and lifecycle API below is recorded here, once, for the
// caller the context names — /v1, E2B's envd and its REST API all come
// through these methods.

// Create makes a live sandbox of tenant and starts its sandbox.
func (m *Manager) Create(ctx context.Context, tenant string, req sandbox.CreateSandboxRequest) (*Sandbox, sandbox.Info, error) {
	s, info, err := m.create(ctx, tenant, req)
	f := map[string]string{"tier": info.Tier, "image": info.Image, "timeout_seconds": strconv.FormatInt(req.TimeoutSeconds, 10)}
	if req.Network != nil && len(req.Network.Allow) > 0 {
		f["network_allow"] = jsonText(req.Network.Allow)
	}
	if req.SnapshotID != "" {
		f["snapshot_id"] = req.SnapshotID // its lineage
	}
	id := info.SandboxID
	if id == "" {
		id = req.SandboxID
	}
	audit.Record(ctx, audit.Result(audit.Event{Tenant: tenant, Action: audit.SandboxCreate, SandboxID: id, Fields: f}, err))
	return s, info, err
}

// Kill removes tenant's live sandbox id: its processes and contexts end,
// its files go. A running execution in it finishes first.
func (m *Manager) Kill(ctx context.Context, tenant, id string) error {
	err := m.kill(ctx, tenant, id)
	audit.Record(ctx, audit.Result(audit.Event{Tenant: tenant, Action: audit.SandboxKill, SandboxID: id}, err))
	return err
}

// Pause pauses the sandbox (pause).
func (s *Sandbox) Pause(ctx context.Context) error {
	err := s.pause(ctx)
	audit.Record(ctx, audit.Result(s.event(audit.SandboxPause, nil), err))
	return err
}

// Resume resumes the paused sandbox (resume).
func (s *Sandbox) Resume(ctx context.Context) (sandbox.Info, error) {
	info, err := s.resume(ctx)
	audit.Record(ctx, audit.Result(s.event(audit.SandboxResume, nil), err))
	return info, err
}

// CreateSnapshot takes a snapshot of the sandbox named name ("": none)
// and describes it. The sandbox runs on (see snapshots.go); a paused one
// is taken as its pause left it.
func (s *Sandbox) CreateSnapshot(ctx context.Context, name string) (sandbox.Snapshot, error) {
	snap, err := s.snapshotNamed(ctx, name)
	f := map[string]string{"name": name}
	if err == nil {
		f["snapshot_id"], f["memory"] = snap.SnapshotID, strconv.FormatBool(snap.Memory)
		f["stored_bytes"] = strconv.FormatInt(snap.StoredBytes, 10)
	}
	audit.Record(ctx, audit.Result(s.event(audit.SandboxSnapshot, f), err))
	return snap, err
}

// DeleteSnapshot deletes tenant's snapshot ref (its id or name). Its
// chunks stay until the store's GC finds no snapshot names them; the
// sandboxes made from it are not touched.
func (m *Manager) DeleteSnapshot(ctx context.Context, tenant, ref string) error {
	err := m.deleteSnapshot(ctx, tenant, ref)
	audit.Record(ctx, audit.Result(audit.Event{Tenant: tenant, Action: audit.SnapshotDelete,
		Fields: map[string]string{"snapshot": ref}}, err))
	return err
}

// Fork makes count sandboxes (1 to MaxForks) from one snapshot of the
// sandbox, each living timeout (0: the default), with the sandbox's
// metadata; then each goes its own way. The snapshot is not kept. Each
// fork is made or fails on its own; the error is the snapshot's. The event
// is the source's, naming the forks made (its lineage); each fork's own
// sandbox.create names the snapshot it was made from.
func (s *Sandbox) Fork(ctx context.Context, count int, timeout time.Duration) ([]ForkResult, error) {
	forks, err := s.fork(ctx, count, timeout)
	var made, failed []string
	for _, f := range forks {
		if f.Err != nil {
			failed = append(failed, f.Err.Error())
			continue
		}
		made = append(made, f.Info.SandboxID)
	}
	fields := map[string]string{"count": strconv.Itoa(count), "forks": jsonText(made)}
	if len(failed) > 0 {
		fields["failed"] = jsonText(failed)
	}
	audit.Record(ctx, audit.Result(s.event(audit.SandboxFork, fields), err))
	return forks, err
}

// Start starts a process in the sandbox; its end is recorded for the same
// caller (process.end, with the bytes written to its stdin).
func (s *Sandbox) Start(ctx context.Context, req sandbox.StartProcessRequest) (*Process, error) {
	p, err := s.start(ctx, req)
	f := map[string]string{"argv": jsonText(req.Cmd), "cwd": req.Cwd, "user": req.User}
	if p != nil {
		f["argv"] = jsonText(p.Info().Cmd) // a shell line, as it ran
	} else if req.Shell != "" {
		f["shell"] = req.Shell
	}
	if req.PTY != nil {
		f["pty"] = strconv.Itoa(int(req.PTY.Cols)) + "x" + strconv.Itoa(int(req.PTY.Rows))
	}
	if req.Tag != "" {
		f["tag"] = req.Tag
	}
	if p != nil {
		f["pid"] = strconv.Itoa(p.PID())
	}
	audit.Record(ctx, audit.Result(s.event(audit.ProcessStart, f), err))
	return p, err
}

// endEvent is the audit event of proc's end.
func endEvent(s *Sandbox, proc *Process, x Exit) audit.Event {
	f := map[string]string{"pid": strconv.Itoa(proc.PID()), "exit_code": strconv.Itoa(x.Code),
		"stdin_bytes": strconv.FormatInt(proc.stdinBytes.Load(), 10), "duration_ms": strconv.FormatInt(x.Duration.Milliseconds(), 10)}
	if proc.info.PTY != nil {
		f["pty"] = "true"
	}
	if x.Signal != 0 {
		f["signal"] = strconv.Itoa(int(x.Signal))
	}
	if x.Ended != "" {
		f["ended"] = x.Ended
	}
	return s.event(audit.ProcessEnd, f)
}

// WriteFile writes r to a file of the sandbox, making its parent
// directories, and describes the file written.
func (s *Sandbox) WriteFile(ctx context.Context, file string, r io.Reader) (sandbox.SandboxFile, error) {
	h := sha256.New()
	f, err := s.writeFile(ctx, file, io.TeeReader(r, h))
	fields := map[string]string{"path": file}
	if err == nil {
		fields["path"], fields["size"], fields["sha256"] = f.Path, strconv.FormatInt(f.Size, 10), hex.EncodeToString(h.Sum(nil))
	}
	audit.Record(ctx, audit.Result(s.event(audit.FileWrite, fields), err))
	return f, err
}

// RemoveFile removes a file or directory tree.
func (s *Sandbox) RemoveFile(ctx context.Context, file string) error {
	err := s.removeFile(ctx, file)
	audit.Record(ctx, audit.Result(s.event(audit.FileRemove, map[string]string{"path": file}), err))
	return err
}

// Move renames a file or directory (what is at the destination is
// replaced as rename(2) does) and describes it at its new path.
func (s *Sandbox) Move(ctx context.Context, from, to string) (sandbox.SandboxFile, error) {
	f, err := s.move(ctx, from, to)
	fields := map[string]string{"from": from, "to": to}
	if err == nil {
		fields["size"] = strconv.FormatInt(f.Size, 10)
	}
	audit.Record(ctx, audit.Result(s.event(audit.FileRename, fields), err))
	return f, err
}

// event is an audit event about s.
func (s *Sandbox) event(action string, fields map[string]string) audit.Event {
	return audit.Event{Tenant: s.tenant, SandboxID: s.id, Action: action, Fields: fields}
}

// jsonText is v as JSON text, how a list travels in an event's fields.
func jsonText(v []string) string {
	b, _ := json.Marshal(v) // strings: cannot fail
	return string(b)
}
