// Package kernel runs stateful code contexts inside a live sandbox: cells
// of code run one after another in one interpreter that keeps variables,
// imports and functions, with output streamed and results as MIME bundles
// (IPython's display protocol), interrupt, restart and fork.
//
// A context is a process in the sandbox, driven over the sandbox's agent
// (internal/agent). Each language with contexts has a runner of its own
// (internal/lang: Contexter; python_context.py for python). The first
// context of a language starts the runner as a root zygote, which has
// loaded what every context needs; every context is forked from it
// (agent StartRequest{Zygote, Via: root}), so creating one costs a fork,
// not an interpreter's start. A context is a zygote itself: Fork asks it to
// fork (StartRequest{Zygote, Via: context}), and the copy holds its state.
//
// The host writes cells to a context's stdin, one JSON request per line;
// the context answers with events on its status fd, one JSON object per
// line, in the order they happened (print output, display() results, the
// last expression's value, the error, the end). What subprocesses write to
// the context's own stdout and stderr arrives as stdout / stderr events
// too, in order with each other but not with the rest.
//
// Languages: python (internal/lang/python_context.py), which forks as
// above; bash (bash_context.sh), an interactive shell started on its own
// for each context, which keeps variables, functions, the working directory
// and the environment, and cannot fork; javascript (javascript_context.js),
// a node process of its own for each context, which cannot fork either.
//
// Interrupt sends SIGINT to the context's process group: the runner raises
// KeyboardInterrupt in the running cell (bash ends the command line). A cell past its timeout is
// interrupted; one that does not stop within the grace period has its
// context killed and restarted.
package kernel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// Errors, wrapped by what returns them.
var (
	// ErrNotFound: no context has the id.
	ErrNotFound = fault.New(fault.NotFound,
		"no such code context in the sandbox (a sandbox made again after it ended has lost its contexts)")
	// ErrInvalid: a language without contexts, a bad working directory or
	// environment variable, code too large, a context that cannot fork.
	// Its message lists them all: the words of a refusal may quote the
	// sandbox's agent, so they stay in the log.
	ErrInvalid = fault.New(fault.InvalidArgument, "the context request is invalid: a language without code contexts "+
		"(python, bash and javascript have them), a working directory that is not an absolute clean path or "+
		"does not exist in the sandbox, an environment variable that is not KEY=VALUE, code over 1 MiB, "+
		"or a fork of a context whose language cannot fork (only python can)")
	// ErrClosed: the Contexts was closed (its sandbox was torn down or
	// made again meanwhile).
	ErrClosed = fault.New(fault.NotFound,
		"no such code context in the sandbox (the sandbox ended meanwhile; one made again has lost its contexts)")
	// ErrLost: a fork of a context whose process did not come back with
	// its sandbox's restore (Restore): there is no state to copy.
	ErrLost = fault.New(fault.FailedPrecondition,
		"the code context lost its process when its sandbox was restored; run a cell in it (it restarts, its state lost) before forking it")
)

// MaxCodeSize bounds one cell's code.
const MaxCodeSize = 1 << 20

// CheckCode refuses a cell's code over MaxCodeSize, naming the field
// "code" (it is ErrInvalid too): what Run checks, for the wires to check
// as they decode a cell, before anything else is done for it.
func CheckCode(code string) error {
	if len(code) > MaxCodeSize {
		return fmt.Errorf("%w: %w", validate.Refuse("code", "is %d bytes; the limit is %d (1 MiB)", len(code), MaxCodeSize), ErrInvalid)
	}
	return nil
}

// DefaultGrace is how long an interrupted cell that ran past its timeout
// may take to stop before its context is restarted.
const DefaultGrace = 2 * time.Second

// DefaultCwd is a context's working directory unless told otherwise.
const DefaultCwd = "/workspace"

// killWait bounds the wait for a killed context's exit.
const killWait = 10 * time.Second

// Error names the host reports itself (the runner reports the language's
// own, KeyboardInterrupt among them).
const (
	// ErrorTimeout: the cell ran past its timeout. Its value says whether
	// it stopped when interrupted or its context was restarted.
	ErrorTimeout = "TimeoutError"
	// ErrorContextRestarted: the context's process ended while a cell ran
	// (it exited, was killed, ran out of memory); the context was restarted
	// and its state is lost.
	ErrorContextRestarted = "ContextRestarted"
)

// Options configure a Contexts.
type Options struct {
	// Env is every context's base environment (PATH, HOME, LANG, the
	// image's variables).
	Env []string
	// Cwd is a context's working directory when its options name none;
	// DefaultCwd if empty.
	Cwd string
	// Grace is how long an interrupted cell may take to stop after its
	// timeout; DefaultGrace if zero.
	Grace time.Duration
	// Sandbox names the live sandbox in the audit events of its cells.
	Sandbox string
}

// ContextOptions describe a context to create.
type ContextOptions struct {
	Language string
	// Cwd is the working directory, absolute; the Contexts' if empty.
	Cwd string
	// Env adds to the base environment, KEY=VALUE each.
	Env []string
	// Label is the host's own name for the context, kept with it (and
	// saved with it: Saved) and found by Labeled; never shown to its
	// clients.
	Label string
}

// Contexts holds the code contexts of one live sandbox. It is safe for
// concurrent use: runs on one context queue and run one at a time, runs on
// different contexts run side by side.
type Contexts struct {
	o Options

	// rootMu is held while a root zygote starts (an interpreter's start),
	// so that one starts per language; mu is not.
	rootMu sync.Mutex
	roots  map[string]*agent.Process // root zygotes, by language; under both

	mu       sync.Mutex
	c        *agent.Client // the sandbox's agent; Resume changes it
	closed   bool
	contexts map[string]*codeContext
	order    []string // context ids in creation order
	// held are the contexts Suspend holds (pause.go).
	held []*codeContext
}

// New returns the contexts of the sandbox whose agent is c. It starts
// nothing until the first context is created.
func New(c *agent.Client, o Options) *Contexts {
	if o.Cwd == "" {
		o.Cwd = DefaultCwd
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	return &Contexts{c: c, o: o, roots: map[string]*agent.Process{}, contexts: map[string]*codeContext{}}
}

// codeContext is one context.
type codeContext struct {
	info sandbox.CodeContext
	cr   lang.Contexter
	env  []string // the full environment it was created with
	// label is ContextOptions.Label.
	label string
	// turn is held by the run in progress (and by Fork): one at a time.
	turn chan struct{}

	mu sync.Mutex
	// cur is the process serving the context now; nil when it was lost
	// with a restore (Restore): the next cell starts a fresh one.
	cur     *instance
	deleted bool
}

// instance is one process of a context (a restart makes another).
type instance struct {
	proc *agent.Process
	out  *output
}

// contexter returns the context runner of language.
func contexter(language string) (lang.Contexter, error) {
	r, ok := lang.Get(language)
	if !ok {
		return nil, fmt.Errorf("language %q: %w", language, ErrInvalid)
	}
	c, ok := r.(lang.Contexter)
	if !ok {
		return nil, fmt.Errorf("language %q has no code contexts: %w", language, ErrInvalid)
	}
	return c, nil
}

// Create starts a fresh context.
func (k *Contexts) Create(ctx context.Context, o ContextOptions) (sandbox.CodeContext, error) {
	cr, err := contexter(o.Language)
	if err != nil {
		return sandbox.CodeContext{}, err
	}
	r, _ := lang.Get(o.Language)
	cwd := o.Cwd
	if cwd == "" {
		cwd = k.o.Cwd
	}
	if err := validate.CheckAbsPath(cwd); err != nil {
		return sandbox.CodeContext{}, fmt.Errorf("%w: %w", validate.Refuse("cwd", "%v", err), ErrInvalid)
	}
	for _, kv := range o.Env {
		if key, _, ok := strings.Cut(kv, "="); !ok || key == "" || strings.ContainsRune(kv, 0) {
			return sandbox.CodeContext{}, fmt.Errorf("environment variable %q: want KEY=VALUE: %w", kv, ErrInvalid)
		}
	}
	env := mergeEnv(k.o.Env, cr.ContextEnv(), o.Env)
	c := &codeContext{info: sandbox.CodeContext{ID: newID(), Language: r.Name(), Cwd: cwd}, cr: cr, env: env, label: o.Label,
		turn: make(chan struct{}, 1)}
	inst, err := k.spawn(ctx, c)
	if err != nil {
		return sandbox.CodeContext{}, err
	}
	c.cur = inst
	if err := k.register(c); err != nil {
		k.kill(inst)
		return sandbox.CodeContext{}, err
	}
	return c.info, nil
}

// register adds c to the contexts, unless the Contexts is closed.
func (k *Contexts) register(c *codeContext) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	k.contexts[c.info.ID] = c
	k.order = append(k.order, c.info.ID)
	return nil
}

// mergeEnv joins environments, later values of a variable replacing
// earlier ones in place.
func mergeEnv(envs ...[]string) []string {
	var out []string
	at := map[string]int{}
	for _, env := range envs {
		for _, kv := range env {
			key, _, _ := strings.Cut(kv, "=")
			if i, ok := at[key]; ok {
				out[i] = kv
				continue
			}
			at[key] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// root returns the root zygote of c's language, starting it if it is not
// running.
func (k *Contexts) root(ctx context.Context, language string) (*agent.Process, error) {
	k.rootMu.Lock()
	defer k.rootMu.Unlock()
	k.mu.Lock()
	p, closed := k.roots[language], k.closed
	k.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if p != nil {
		select {
		case <-p.Done():
		default:
			return p, nil
		}
	}
	cr, err := contexter(language)
	if err != nil {
		return nil, err
	}
	step := cr.ContextStep()
	p, err = k.client().Start(ctx, agent.StartRequest{Argv: step.Argv, Env: mergeEnv(k.o.Env, step.Env), Dir: "/", Zygote: true}, nil)
	if err != nil {
		return nil, fmt.Errorf("start the %s context runner: %w", language, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed { // Close missed it
		_ = p.Signal(ctx, syscall.SIGKILL)
		return nil, ErrClosed
	}
	k.roots[language] = p
	return p, nil
}

// spawn starts a fresh process for c: forked from its language's root, or
// started on its own for a language without a zygote.
func (k *Contexts) spawn(ctx context.Context, c *codeContext) (*instance, error) {
	if !c.cr.ContextZygote() {
		return k.startAlone(ctx, c)
	}
	root, err := k.root(ctx, c.info.Language)
	if err != nil {
		return nil, err
	}
	return k.startVia(ctx, root, agent.StartRequest{Argv: []string{"context"}, Env: c.env, Dir: c.info.Cwd})
}

// startAlone starts c's runner as a process of its own and sends it its
// setup.
func (k *Contexts) startAlone(ctx context.Context, c *codeContext) (*instance, error) {
	step := c.cr.ContextStep()
	out := &output{}
	p, err := k.client().Start(ctx, agent.StartRequest{Argv: step.Argv, Env: mergeEnv(c.env, step.Env), Dir: c.info.Cwd,
		Stdin: true, StatusFD: true, Persistent: true}, out)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("start a %s context in %s: %w: %w", c.info.Language, c.info.Cwd, ErrInvalid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("start a context: %w", err)
	}
	inst := &instance{proc: p, out: out}
	if setup := c.cr.ContextSetup(); setup != nil {
		if err := p.WriteStdin(setup); err != nil {
			k.kill(inst)
			return nil, fmt.Errorf("set up a context: %w", err)
		}
	}
	return inst, nil
}

// startVia starts a context process through the zygote via (the root, or
// the context to fork), and checks what it said when ready.
func (k *Contexts) startVia(ctx context.Context, via *agent.Process, req agent.StartRequest) (*instance, error) {
	req.Zygote, req.Via, req.Stdin, req.StatusFD = true, via.ID(), true, true
	out := &output{}
	p, err := k.client().Start(ctx, req, out)
	if err != nil {
		return nil, fmt.Errorf("start a context: %w", err)
	}
	inst := &instance{proc: p, out: out}
	var ready struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(p.Ready, &ready); err != nil {
		k.kill(inst)
		return nil, fmt.Errorf("context ready message %q: %w", p.Ready, err)
	}
	if ready.Error != "" {
		k.kill(inst)
		return nil, fmt.Errorf("working directory %s: %s: %w", req.Dir, ready.Error, ErrInvalid)
	}
	return inst, nil
}

// kill ends inst's process and waits (a while) for it to be gone; a nil
// inst (lost) has nothing to end.
func (k *Contexts) kill(inst *instance) {
	if inst == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	_ = inst.proc.Signal(ctx, syscall.SIGKILL)
	_, _ = inst.proc.Wait(ctx)
}

// get returns the context id.
func (k *Contexts) get(id string) (*codeContext, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, ErrClosed
	}
	c := k.contexts[id]
	if c == nil {
		return nil, fmt.Errorf("context %q: %w", id, ErrNotFound)
	}
	return c, nil
}

// current returns the process serving c (nil when lost with a restore),
// or ErrNotFound once deleted.
func (c *codeContext) current() (*instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil, fmt.Errorf("context %q: %w", c.info.ID, ErrNotFound)
	}
	return c.cur, nil
}

// renew replaces c's process old (killed if still running) by a fresh one,
// unless that happened already; it returns the process serving c.
func (k *Contexts) renew(ctx context.Context, c *codeContext, old *instance) (*instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil, fmt.Errorf("context %q: %w", c.info.ID, ErrNotFound)
	}
	if c.cur != old {
		return c.cur, nil
	}
	k.kill(old)
	inst, err := k.spawn(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("restart context %s: %w", c.info.ID, err)
	}
	c.cur = inst
	return inst, nil
}

// take waits for c's turn (the run before it to end).
func (c *codeContext) take(ctx context.Context) error {
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *codeContext) release() { <-c.turn }

// Interrupt raises KeyboardInterrupt (or the language's equivalent) in the
// context's running cell; with no cell running it does nothing.
func (k *Contexts) Interrupt(ctx context.Context, id string) error {
	c, err := k.get(id)
	if err != nil {
		return err
	}
	inst, err := c.current()
	if err != nil || inst == nil { // lost: no cell runs
		return err
	}
	if err := inst.proc.Signal(ctx, syscall.SIGINT); err != nil {
		return fmt.Errorf("interrupt context %s: %w", id, err)
	}
	return nil
}

// Restart replaces the context's process by a fresh one with the same id,
// language, working directory and environment; its state is gone. A cell
// running in it ends with a ContextRestarted error.
func (k *Contexts) Restart(ctx context.Context, id string) error {
	c, err := k.get(id)
	if err != nil {
		return err
	}
	inst, err := c.current()
	if err != nil {
		return err
	}
	_, err = k.renew(ctx, c, inst)
	return err
}

// Fork makes a new context holding a copy of the context id's state (its
// process forks), once the context's queued runs are done. The copy has
// the same language, working directory and environment; restarting it
// makes a fresh context, not a copy.
func (k *Contexts) Fork(ctx context.Context, id string) (sandbox.CodeContext, error) {
	c, err := k.get(id)
	if err != nil {
		return sandbox.CodeContext{}, err
	}
	if err := c.take(ctx); err != nil {
		return sandbox.CodeContext{}, err
	}
	defer c.release()
	if !c.cr.ContextZygote() {
		return sandbox.CodeContext{}, fmt.Errorf("%s contexts cannot fork: %w", c.info.Language, ErrInvalid)
	}
	inst, err := c.current()
	if err != nil {
		return sandbox.CodeContext{}, err
	}
	if inst == nil {
		return sandbox.CodeContext{}, fmt.Errorf("fork context %s: %w", id, ErrLost)
	}
	f := &codeContext{info: sandbox.CodeContext{ID: newID(), Language: c.info.Language, Cwd: c.info.Cwd}, cr: c.cr, env: c.env, turn: make(chan struct{}, 1)}
	if f.cur, err = k.startVia(ctx, inst.proc, agent.StartRequest{Argv: []string{"fork"}, Env: c.env, Dir: c.info.Cwd}); err != nil {
		return sandbox.CodeContext{}, fmt.Errorf("fork context %s: %w", id, err)
	}
	if err := k.register(f); err != nil {
		k.kill(f.cur)
		return sandbox.CodeContext{}, err
	}
	audit.Record(ctx, audit.Event{Action: audit.ContextFork, SandboxID: k.o.Sandbox, Fields: map[string]string{"context": f.info.ID, "parent": id}})
	return f.info, nil
}

// Delete ends the context. A cell running in it ends, and its Run returns
// ErrNotFound.
func (k *Contexts) Delete(ctx context.Context, id string) error {
	k.mu.Lock()
	c := k.contexts[id]
	if c == nil {
		k.mu.Unlock()
		return fmt.Errorf("context %q: %w", id, ErrNotFound)
	}
	delete(k.contexts, id)
	k.order = slices.DeleteFunc(k.order, func(s string) bool { return s == id })
	k.mu.Unlock()
	c.mu.Lock()
	c.deleted = true
	inst := c.cur
	c.mu.Unlock()
	if inst == nil {
		return nil
	}
	_ = inst.proc.Signal(ctx, syscall.SIGKILL)
	if _, err := inst.proc.Wait(ctx); err != nil {
		return fmt.Errorf("delete context %s: %w", id, err)
	}
	return nil
}

// List returns the contexts, oldest first.
func (k *Contexts) List() []sandbox.CodeContext {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]sandbox.CodeContext, 0, len(k.order))
	for _, id := range k.order {
		out = append(out, k.contexts[id].info)
	}
	return out
}

// Labeled returns the oldest context made with label (ContextOptions),
// if there is one.
func (k *Contexts) Labeled(label string) (sandbox.CodeContext, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range k.order {
		if c := k.contexts[id]; c.label == label {
			return c.info, true
		}
	}
	return sandbox.CodeContext{}, false
}

// Close ends every context and root zygote and waits for them (as long as
// ctx allows). Calls after it fail with ErrClosed.
func (k *Contexts) Close(ctx context.Context) error {
	k.mu.Lock()
	k.closed = true
	var procs []*agent.Process
	for _, c := range k.contexts {
		c.mu.Lock()
		c.deleted = true
		if c.cur != nil {
			procs = append(procs, c.cur.proc)
		}
		c.mu.Unlock()
	}
	for _, p := range k.roots {
		procs = append(procs, p)
	}
	k.contexts, k.roots, k.order = map[string]*codeContext{}, map[string]*agent.Process{}, nil
	held := k.held
	k.held = nil
	k.mu.Unlock()
	for _, c := range held {
		c.release() // what waits for its turn finds the context gone
	}
	var errs []error
	for _, p := range procs {
		_ = p.Signal(ctx, syscall.SIGKILL)
	}
	for _, p := range procs {
		// A sandbox that is gone has ended them all.
		if _, err := p.Wait(ctx); err != nil && !errors.Is(err, agent.ErrLost) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close contexts: %w", err)
	}
	return nil
}
