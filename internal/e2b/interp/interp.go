// Package interp serves the code interpreter E2B's @e2b/code-interpreter
// SDK speaks (a sandbox's port 49999): POST /execute runs a cell and
// streams its output as newline-delimited JSON, /contexts creates, lists,
// restarts and deletes code contexts, GET /health answers. It is backed by
// the code contexts of Corral's live sandboxes (internal/live,
// internal/kernel): no Jupyter server runs in the sandbox.
//
// The dispatcher (internal/e2b) authenticates each request, routes it to
// the node owning the sandbox and puts the sandbox in the request's
// context (internal/e2b/target); this package trusts that.
package interp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/sandbox"
)

// contexts returns the code contexts of the live sandbox t names; a
// sandbox gone, or torn down meanwhile, is target.ErrGone.
func (h *handler) contexts(ctx context.Context, t target.Target) (*kernel.Contexts, error) {
	sb, err := t.Sandbox(h.m)
	if err != nil {
		return nil, err
	}
	k, err := sb.Contexts(ctx)
	if errors.Is(err, kernel.ErrClosed) {
		return nil, fmt.Errorf("%w: %w", target.ErrGone, err)
	}
	return k, err
}

// defaultKeepAlive is how often a stream with nothing else to say gets a
// keepalive line (and how long a cell waiting for its context's turn waits
// before the answer's header goes out).
const defaultKeepAlive = 5 * time.Second

// defaultLanguage is the language of a cell that names neither a context
// nor a language, as in E2B.
const defaultLanguage = "python"

// handler serves one node's code interpreter. It is safe for concurrent
// use.
type handler struct {
	m         *live.Manager
	log       *slog.Logger
	keepAlive time.Duration

	// mu guards defaults: each sandbox's default context per language,
	// made at its first cell that names no context.
	mu       sync.Mutex
	defaults map[defaultKey]*defaultContext
}

type defaultKey struct{ tenant, sandbox, language string }

// defaultLabel, then the language, labels a default context
// (kernel.ContextOptions.Label).
const defaultLabel = "e2b-default:"

// defaultContext is one default context; mu is held while it is made, so
// that cells arriving together share one.
type defaultContext struct {
	mu sync.Mutex
	id string
}

// New returns the code interpreter over m's live sandboxes.
func New(m *live.Manager, log *slog.Logger) http.Handler {
	h := &handler{m: m, log: log, keepAlive: defaultKeepAlive, defaults: map[defaultKey]*defaultContext{}}
	return h.routes()
}

func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", h.with(h.health))
	mux.HandleFunc("POST /execute", h.with(h.execute))
	mux.HandleFunc("POST /contexts", h.with(h.createContext))
	mux.HandleFunc("GET /contexts", h.with(h.listContexts))
	mux.HandleFunc("DELETE /contexts/{id}", h.with(h.deleteContext))
	mux.HandleFunc("POST /contexts/{id}/restart", h.with(h.restartContext))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		refuse(w, fault.NotFound, "no such route in the code interpreter: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// with passes the request's target to f; a request without one is a
// wiring bug of the server, not the client's.
func (h *handler) with(f func(http.ResponseWriter, *http.Request, target.Target)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, ok := target.From(r.Context())
		if !ok {
			h.log.Error("code interpreter request without a target sandbox", "path", r.URL.Path)
			target.WriteError(w, http.StatusInternalServerError, "internal error")
			return
		}
		f(w, r, t)
	}
}

func (h *handler) health(w http.ResponseWriter, _ *http.Request, _ target.Target) {
	writeJSON(w, http.StatusOK, "OK")
}

// contextInfo is a context as the SDK reads it.
type contextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

type createContextRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (h *handler) createContext(w http.ResponseWriter, r *http.Request, t target.Target) {
	var req createContextRequest
	if !decode(w, r, &req) {
		return
	}
	language, ok := canonical(w, req.Language)
	if !ok {
		return
	}
	k, err := h.contexts(r.Context(), t)
	var info sandbox.CodeContext
	if err == nil {
		info, err = k.Create(r.Context(), kernel.ContextOptions{Language: language, Cwd: cwd(req.Cwd)})
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, contextInfo(info))
}

func (h *handler) listContexts(w http.ResponseWriter, r *http.Request, t target.Target) {
	k, err := h.contexts(r.Context(), t)
	var infos []sandbox.CodeContext
	if err == nil {
		infos = k.List()
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	out := make([]contextInfo, 0, len(infos))
	for _, i := range infos {
		out = append(out, contextInfo(i))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) deleteContext(w http.ResponseWriter, r *http.Request, t target.Target) {
	k, err := h.contexts(r.Context(), t)
	if err == nil {
		err = k.Delete(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) restartContext(w http.ResponseWriter, r *http.Request, t target.Target) {
	k, err := h.contexts(r.Context(), t)
	if err == nil {
		err = k.Restart(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// canonical returns the language a request names, by Corral's name for
// it (E2B's "js" is javascript): python if it names none. A language
// Corral does not know is answered 400.
func canonical(w http.ResponseWriter, language string) (string, bool) {
	language = strings.ToLower(strings.TrimSpace(language))
	if language == "" {
		return defaultLanguage, true
	}
	r, ok := lang.Get(language)
	if !ok {
		refuse(w, fault.InvalidArgument, "language '"+language+"' has no code contexts here (python, javascript and bash have them)")
		return "", false
	}
	return r.Name(), true
}

// defaultContext returns the id of t's default context of language,
// making it if there is none.
func (h *handler) defaultContext(ctx context.Context, t target.Target, language string) (*defaultContext, string, error) {
	k := defaultKey{t.Tenant, t.SandboxID, language}
	h.mu.Lock()
	d, ok := h.defaults[k]
	if !ok {
		h.sweepLocked()
		d = &defaultContext{}
		h.defaults[k] = d
	}
	h.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.id != "" {
		return d, d.id, nil
	}
	ks, err := h.contexts(ctx, t)
	if err != nil {
		return nil, "", err
	}
	// Labeled: a sandbox with its default context from before this node
	// process knew it (made from a snapshot, or moved here from another
	// node, with its memory) goes on in it, with its variables.
	label := defaultLabel + language
	if c, ok := ks.Labeled(label); ok {
		d.id = c.ID
		return d, d.id, nil
	}
	info, err := ks.Create(ctx, kernel.ContextOptions{Language: language, Cwd: cwd(""), Label: label})
	if err != nil {
		return nil, "", err
	}
	d.id = info.ID
	return d, d.id, nil
}

// forget drops d's context id if it is still id (it was deleted, or its
// sandbox was made again), so that the next cell makes another.
func (d *defaultContext) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.id == id {
		d.id = ""
	}
}

// sweepLocked drops the default contexts of sandboxes that are gone; it
// runs as a sandbox gets its first, so the map holds the live ones and
// a few more (h.mu is held).
func (h *handler) sweepLocked() {
	for k := range h.defaults {
		if _, err := h.m.Get(k.tenant, k.sandbox); errors.Is(err, live.ErrNotFound) {
			delete(h.defaults, k)
		}
	}
}

// decode reads a JSON body into v (httpbody: at most httpbody.MaxJSON, as
// every wire's, one value and nothing after it) and answers a bad one; an
// empty body leaves v as it is. Unknown fields are ignored, as by E2B's
// code interpreter.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := httpbody.ReadJSON(w, r, httpbody.MaxJSON, v, httpbody.Rules{}); err != nil {
		answer(w, fault.Of(err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// cwd is a context's working directory as E2B's code interpreter has it:
// the user's home unless named, a relative one under it.
func cwd(dir string) string {
	switch {
	case dir == "":
		return live.UserHome
	case !strings.HasPrefix(dir, "/"):
		return path.Join(live.UserHome, dir)
	}
	return dir
}
