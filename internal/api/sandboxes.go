package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/stream"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// Live sandboxes (/v1/sandboxes): a sandbox held for its whole life, with
// processes, files and code contexts (internal/live). Every call about one
// sandbox reaches the node that owns it (route); there, it is served on the
// sandbox's handle.

// box returns the handle of tenant's live sandbox id.
func (s *Server) box(t *Tenant, id string) (*live.Sandbox, error) { return s.live.Get(t.Name, id) }

// proc returns the handle of process pid of tenant's live sandbox id.
func (s *Server) proc(t *Tenant, id string, pid int) (*live.Process, error) {
	sb, err := s.box(t, id)
	if err != nil {
		return nil, err
	}
	return sb.Process(pid)
}

// contexts returns the code contexts of tenant's live sandbox id.
func (s *Server) contexts(r *http.Request, t *Tenant, id string) (*kernel.Contexts, error) {
	sb, err := s.box(t, id)
	if err != nil {
		return nil, err
	}
	return sb.Contexts(r.Context())
}

func (s *Server) sandboxesOn(w http.ResponseWriter) bool {
	if s.live == nil {
		writeError(w, notFound("sandboxes are not enabled on this server"))
		return false
	}
	return true
}

// sandboxRoute checks that sandboxes are on and the path's sandbox id,
// and sends the call to the sandbox's node; it reports whether this node
// serves it.
func (s *Server) sandboxRoute(w http.ResponseWriter, r *http.Request, t *Tenant, how int) (string, bool) {
	if !s.sandboxesOn(w) {
		return "", false
	}
	id, ok := s.sessionID(w, r)
	if !ok {
		return "", false
	}
	return id, s.route(w, r, t, id, how|sandboxCall)
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if !s.sandboxesOn(w) {
		return
	}
	raw, err := httpbody.Read(w, r, httpbody.MaxJSON)
	var req sandbox.CreateSandboxRequest
	if err == nil {
		err = httpbody.Decode(raw, &req, rules)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	if req.SandboxID != "" {
		// A client-chosen id may be another node's already: that node
		// answers (that it exists).
		r.Body = io.NopCloser(bytes.NewReader(raw))
		if !s.route(w, r, t, req.SandboxID, sandboxCall) {
			return
		}
	}
	_, info, err := s.live.Create(r.Context(), t.Name, req)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	w.Header().Set("Location", "/v1/sandboxes/"+info.SandboxID)
	writeJSON(w, http.StatusCreated, info)
}

// metadataFilter reads the metadata filters of GET /v1/sandboxes:
// metadata.KEY=VALUE, or metadata=KEY=VALUE (E2B's form), all of which
// must match.
func metadataFilter(r *http.Request) (map[string]string, *Error) {
	want := map[string]string{}
	for k, vs := range r.URL.Query() {
		switch {
		case strings.HasPrefix(k, "metadata."):
			want[strings.TrimPrefix(k, "metadata.")] = vs[len(vs)-1]
		case k == "metadata":
			for _, v := range vs {
				for _, pair := range strings.Split(v, "&") {
					mk, mv, ok := strings.Cut(pair, "=")
					if !ok || mk == "" {
						return nil, refuse("metadata", "give metadata filters as metadata.KEY=VALUE or metadata=KEY%3DVALUE")
					}
					want[mk] = mv
				}
			}
		}
	}
	if err := validate.CheckMetadata(want); err != nil {
		return nil, answer(fault.Of(err))
	}
	return want, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if !s.sandboxesOn(w) {
		return
	}
	want, e := metadataFilter(r)
	if e != nil {
		writeError(w, e)
		return
	}
	all, err := s.Sandboxes(r.Context(), t.Name)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	out := []sandbox.Info{}
	for _, info := range all {
		match := true
		for k, v := range want {
			if got, ok := info.Metadata[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b sandbox.Info) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	writeJSON(w, http.StatusOK, sandbox.SandboxList{Sandboxes: out})
}

// Sandboxes lists tenant's live sandboxes that have not expired, on every
// node (from what each published in the shared store), in no order.
func (s *Server) Sandboxes(ctx context.Context, tenant string) ([]sandbox.Info, error) {
	var all []sandbox.Info
	switch {
	case s.live == nil:
		return nil, nil
	case s.cluster == nil:
		all = s.live.List(tenant)
	default:
		list, err := s.cluster.Sandboxes(ctx, tenant)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			var info sandbox.Info
			if err := json.Unmarshal(sb.Info, &info); err != nil {
				s.log.Warn("a sandbox's published description is not JSON", "sandbox", sb.ID, "node", sb.Node, "err", err)
				continue
			}
			all = append(all, info)
		}
	}
	now := time.Now()
	// Expired ones are the reaper's of their node.
	return slices.DeleteFunc(all, func(info sandbox.Info) bool { return now.After(info.ExpiresAt) }), nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	sb, err := s.box(t, id)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusOK, sb.Info())
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, forgetLost)
	if !ok {
		return
	}
	s.reply(w, http.StatusNoContent, nil, s.live.Kill(r.Context(), t.Name, id))
}

func (s *Server) setSandboxTimeout(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	var body struct {
		TimeoutSeconds int64 `json:"timeout_seconds"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	sb, err := s.box(t, id)
	var info sandbox.Info
	if err == nil {
		info, err = sb.SetTimeout(r.Context(), validate.Duration(body.TimeoutSeconds, time.Second))
	}
	s.reply(w, http.StatusOK, info, err)
}

// pauseSandbox pauses a sandbox (live.Sandbox.Pause) and answers its
// description, state paused.
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	sb, err := s.box(t, id)
	if err == nil {
		err = sb.Pause(r.Context())
	}
	if err == nil {
		_, err = s.box(t, id)
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusOK, sb.Info())
}

// resumeSandbox resumes a paused sandbox; the answer says what it kept.
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	sb, err := s.box(t, id)
	var info sandbox.Info
	if err == nil {
		info, err = sb.Resume(r.Context())
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// sandboxMetrics answers a sandbox's usage readings (live.Sandbox.Metrics)
// at or after since and before until.
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	since, until, e := metricsBounds(r)
	if e != nil {
		writeError(w, e)
		return
	}
	sb, err := s.box(t, id)
	var out []sandbox.SandboxMetric
	if err == nil {
		out, err = sb.Metrics(r.Context(), since, until)
	}
	s.reply(w, http.StatusOK, sandbox.SandboxMetrics{Metrics: out}, err)
}

// metricsBounds reads the since and until of GET
// /v1/sandboxes/{id}/metrics (zero: none), until after since.
func metricsBounds(r *http.Request) (since, until time.Time, e *Error) {
	q := r.URL.Query()
	for _, b := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		v := q.Get(b.name)
		if v == "" {
			continue
		}
		ts, err := readTime(v)
		if err != nil {
			return since, until, refuse(b.name, "must be an RFC 3339 time or unix seconds")
		}
		*b.dst = ts
	}
	if !since.IsZero() && !until.IsZero() && !until.After(since) {
		return since, until, refuse("until", "must be after since")
	}
	return since, until, nil
}

// maxUnix is the last second of year 9999, the last an RFC 3339 time can
// name.
const maxUnix = 253402300799

// readTime reads an RFC 3339 time, or a number of seconds since the Unix
// epoch.
func readTime(v string) (time.Time, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > maxUnix {
			return time.Time{}, fmt.Errorf("unix time %d out of range", n)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Parse(time.RFC3339Nano, v)
}

// ---- processes ----

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	var req sandbox.StartProcessRequest
	if !s.decode(w, r, &req) {
		return
	}
	sb, err := s.box(t, id)
	var p *live.Process
	if err == nil {
		p, err = sb.Start(r.Context(), req)
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusCreated, p.Info())
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	sb, err := s.box(t, id)
	var procs []*live.Process
	if err == nil {
		procs, err = sb.Processes()
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	out := sandbox.ProcessList{Processes: make([]sandbox.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		out.Processes = append(out.Processes, p.Info())
	}
	writeJSON(w, http.StatusOK, out)
}

// processPath reads the sandbox id and pid of a process call and routes it.
func (s *Server) processPath(w http.ResponseWriter, r *http.Request, t *Tenant) (string, int, bool) {
	if !s.sandboxesOn(w) {
		return "", 0, false
	}
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return "", 0, false
	}
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		writeError(w, notFound("no such process"))
		return "", 0, false
	}
	return id, pid, true
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, pid, ok := s.processPath(w, r, t)
	if !ok {
		return
	}
	wait, err := queryBool(r, "wait")
	if err != nil {
		s.fail(w, err)
		return
	}
	p, err := s.proc(t, id, pid)
	var info sandbox.ProcessInfo
	switch {
	case err != nil:
	case wait:
		info, err = p.Wait(r.Context())
	default:
		info = p.Info()
	}
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left
		}
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, pid, ok := s.processPath(w, r, t)
	if !ok {
		return
	}
	p, err := s.proc(t, id, pid)
	if err != nil {
		s.fail(w, err)
		return
	}
	n, err := p.WriteStdin(r.Context(), httpbody.Reader(w, r, httpbody.MaxFile))
	if err != nil {
		// Nothing of the body is lost silently: the answer says how much
		// of it the process's stdin took, its first bytes (none, if 0).
		e := *asError(r.Context(), err, s.log)
		e.Written = &n
		writeError(w, &e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"written": n})
}

func (s *Server) closeStdin(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, pid, ok := s.processPath(w, r, t)
	if !ok {
		return
	}
	p, err := s.proc(t, id, pid)
	if err == nil {
		err = p.CloseStdin()
	}
	s.reply(w, http.StatusNoContent, nil, err)
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, pid, ok := s.processPath(w, r, t)
	if !ok {
		return
	}
	var body struct {
		Signal json.RawMessage `json:"signal"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	name := strings.Trim(string(body.Signal), `"`)
	if name == "" {
		name = "SIGKILL"
	}
	sig, err := live.ParseSignal(name)
	if err != nil {
		writeError(w, refuse("signal", "give a signal name (\"SIGTERM\") or number (15)"))
		return
	}
	p, err := s.proc(t, id, pid)
	if err == nil {
		err = p.Signal(r.Context(), sig)
	}
	s.reply(w, http.StatusNoContent, nil, err)
}

func (s *Server) resizeProcess(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, pid, ok := s.processPath(w, r, t)
	if !ok {
		return
	}
	var size sandbox.PTYSize
	if !s.decode(w, r, &size) {
		return
	}
	p, err := s.proc(t, id, pid)
	if err == nil {
		err = p.Resize(r.Context(), size)
	}
	s.reply(w, http.StatusNoContent, nil, err)
}

// processEvents streams a process's events as Server-Sent Events: "id:
// SEQ", "event: start|stdout|stderr|dropped|end", "data: <JSON
// ProcessEvent>". A client that connects late gets what the buffer holds
// first; with Last-Event-ID (or ?last_event_id) it gets what came after.
// The stream ends after the end event.
func (s *Server) processEvents(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, pid, ok := s.processPath(w, r, t)
	if !ok {
		return
	}
	p, err := s.proc(t, id, pid)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	sse, after, ok := resumedStream(w, r)
	if !ok {
		return
	}
	// It ends with the process, or with the client.
	_ = stream.Follow(r.Context(), p.Follow(after), sse, func(ev sandbox.ProcessEvent) error {
		return sse.Event(ev.Seq, ev.Type, ev)
	}, keepAlive)
}

// ---- files ----

// filePathParam reads ?path=.
func filePathParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, refuse("path", "give the file's path: ?path=/workspace/name or a path relative to /workspace"))
		return "", false
	}
	return p, true
}

func (s *Server) sandboxFiles(w http.ResponseWriter, r *http.Request, t *Tenant) (string, string, bool) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return "", "", false
	}
	p, ok := filePathParam(w, r)
	return id, p, ok
}

func (s *Server) readSandboxFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, p, ok := s.sandboxFiles(w, r, t)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	cw := &committingWriter{w: w}
	sb, err := s.box(t, id)
	if err == nil {
		err = sb.ReadFile(r.Context(), p, cw)
	}
	if err != nil && !cw.started {
		w.Header().Del("Content-Type")
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	if err != nil {
		s.log.WarnContext(r.Context(), "sandbox download cut short", "sandbox", id, "err", err)
		return
	}
	if !cw.started {
		w.WriteHeader(http.StatusOK) // an empty file
	}
}

func (s *Server) writeSandboxFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, p, ok := s.sandboxFiles(w, r, t)
	if !ok {
		return
	}
	sb, err := s.box(t, id)
	var f sandbox.SandboxFile
	if err == nil {
		f, err = sb.WriteFile(r.Context(), p, httpbody.Reader(w, r, httpbody.MaxFile))
	}
	s.reply(w, http.StatusOK, f, err)
}

func (s *Server) removeSandboxFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, p, ok := s.sandboxFiles(w, r, t)
	if !ok {
		return
	}
	sb, err := s.box(t, id)
	if err == nil {
		err = sb.RemoveFile(r.Context(), p)
	}
	s.reply(w, http.StatusNoContent, nil, err)
}

func (s *Server) listSandboxFiles(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "/workspace"
	}
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > live.MaxListDepth {
			writeError(w, refuse("depth", fmt.Sprintf("must be between 1 and %d", live.MaxListDepth)))
			return
		}
		depth = n
	}
	sb, err := s.box(t, id)
	var entries []sandbox.SandboxFile
	if err == nil {
		entries, err = sb.ListFiles(r.Context(), p, depth)
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusOK, sandbox.SandboxFileList{Path: p, Entries: entries})
}

func (s *Server) statSandboxFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, p, ok := s.sandboxFiles(w, r, t)
	if !ok {
		return
	}
	sb, err := s.box(t, id)
	var f sandbox.SandboxFile
	if err == nil {
		f, err = sb.StatFile(r.Context(), p)
	}
	s.reply(w, http.StatusOK, f, err)
}

func (s *Server) makeSandboxDir(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	var body struct {
		Path    string `json:"path"`
		Parents bool   `json:"parents"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	sb, err := s.box(t, id)
	var f sandbox.SandboxFile
	if err == nil {
		f, err = sb.MakeDir(r.Context(), body.Path, body.Parents)
	}
	s.reply(w, http.StatusCreated, f, err)
}

func (s *Server) moveSandboxFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	var body struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	sb, err := s.box(t, id)
	var f sandbox.SandboxFile
	if err == nil {
		f, err = sb.Move(r.Context(), body.From, body.To)
	}
	s.reply(w, http.StatusOK, f, err)
}

// watchBacklog bounds the events a watch stream holds for a slow client;
// beyond it the watch holds them (internal/agent's bound: past that, an
// overflow event).
const watchBacklog = 4096

// watchSandboxDir streams the changes under a directory as Server-Sent
// Events: "event: create|write|remove|rename|chmod|overflow|end", "data:
// {"path", "op"}". The stream ends after an end event (the directory
// went, or the sandbox) or when the client leaves.
func (s *Server) watchSandboxDir(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "/workspace"
	}
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		s.fail(w, err)
		return
	}
	sse, ok := eventStream(w)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel() // after stop: a watch waiting on a full queue lets go
	q := stream.NewQueue[sandbox.FileEvent](watchBacklog)
	sb, err := s.box(t, id)
	var stop func() error
	if err == nil {
		stop, err = sb.Watch(ctx, p, recursive, func(ev sandbox.FileEvent) {
			_ = q.Push(ctx, ev) // fails only once the stream is over
			if ev.Op == live.OpEnd {
				q.Close(nil)
			}
		})
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	defer func() {
		if err := stop(); err != nil {
			s.log.DebugContext(r.Context(), "a watch ended", "sandbox", id, "err", err)
		}
	}()
	sse.Begin()
	var seq uint64
	_ = stream.Follow(ctx, q, sse, func(ev sandbox.FileEvent) error {
		seq++
		return sse.Event(seq, ev.Op, ev)
	}, keepAlive)
}
