package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/sandbox"
	"github.com/google/jsonschema-go/jsonschema"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Live sandboxes and their code contexts: a model creates a sandbox (or
// lets its first run_cell create one), runs cells in a context whose
// variables, imports and functions persist between calls, forks a context
// to try something without losing its state, and closes what it made.

// Tool names of live sandboxes.
const (
	ToolCreateSandbox = "create_sandbox"
	ToolRunCell       = "run_cell"
	ToolForkContext   = "fork_context"
	ToolCloseSandbox  = "close_sandbox"
	// ToolSnapshotSandbox and ToolForkSandbox keep and copy a whole
	// sandbox (snapshots.go).
	ToolSnapshotSandbox = "snapshot_sandbox"
	ToolForkSandbox     = "fork_sandbox"
)

// Bounds of run_cell: a cell's default and largest timeout, and how much
// of each output stream and how many image bytes one answer carries (a
// model's context is the limit; the cell can write more to a file).
const (
	defaultCellTimeout = 60 * time.Second
	maxCellTimeout     = time.Hour
	maxStreamBytes     = 32 << 10
	maxImageBytes      = 4 << 20
)

// CreateSandboxArgs are the arguments of create_sandbox.
type CreateSandboxArgs struct {
	Language       string            `json:"language,omitempty" jsonschema:"the language of the sandbox's first code context: python (the default), javascript or bash"`
	Image          string            `json:"image,omitempty" jsonschema:"the root filesystem (e.g. python, with numpy, pandas and matplotlib); default: the server's choice for the language"`
	Tier           string            `json:"tier,omitempty" jsonschema:"the isolation: container (runc), gvisor (a kernel in user space: stronger, slower) or auto (by what the code does); default: the server's"`
	TimeoutSeconds int64             `json:"timeout_seconds,omitempty" jsonschema:"how long the sandbox lives from now, in seconds (default: the server's, 300 unless configured); using it does not extend it"`
	MemoryMB       int64             `json:"memory_mb,omitempty" jsonschema:"memory for the whole sandbox (every context and process in it) in MB"`
	CPUCores       float64           `json:"cpu_cores,omitempty" jsonschema:"CPU cores for the whole sandbox, e.g. 0.5 or 2"`
	CPUs           float64           `json:"cpus,omitempty" jsonschema:"the old name of cpu_cores, kept for one release"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for everything that runs in the sandbox"`
	NetworkAllow   []string          `json:"network_allow,omitempty" jsonschema:"domains the sandbox may reach through the server's egress proxy, e.g. pypi.org or *.github.com; without it there is no network"`
	OnTimeout      string            `json:"on_timeout,omitempty" jsonschema:"what happens at the timeout: kill (the default: the sandbox and its files end) or pause (it is kept, its files and on gVisor its variables, and the next call resumes it)"`
	SnapshotID     string            `json:"snapshot_id,omitempty" jsonschema:"make the sandbox from this snapshot (from snapshot_sandbox: its id or name): its files and, on gVisor, its code contexts with their variables; language, image and tier are the snapshot's"`
}

// LiveSandbox is the structured result of create_sandbox.
type LiveSandbox struct {
	SandboxID string `json:"sandbox_id"`
	// ContextID is the sandbox's first code context.
	ContextID string    `json:"context_id"`
	Language  string    `json:"language"`
	Image     string    `json:"image"`
	Tier      string    `json:"tier"`
	ExpiresAt time.Time `json:"expires_at"`
}

// RunCellArgs are the arguments of run_cell.
type RunCellArgs struct {
	Code           string `json:"code" jsonschema:"the cell's code; the value of its last expression comes back as the result, as in a notebook"`
	SandboxID      string `json:"sandbox_id,omitempty" jsonschema:"the live sandbox to run in (from create_sandbox or an earlier run_cell); omit it to create one, whose sandbox_id and context_id the result gives"`
	ContextID      string `json:"context_id,omitempty" jsonschema:"the code context whose variables the cell sees and sets; omit it to create a new context (a fresh interpreter) in the sandbox"`
	Language       string `json:"language,omitempty" jsonschema:"the language of a context this call creates: python (the default), javascript or bash; not used with context_id"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty" jsonschema:"bound on this cell in seconds (default 60, at most 3600); past it the cell is interrupted, and its TimeoutError says whether the context kept its state"`
}

// CellOutput is the structured result of run_cell.
type CellOutput struct {
	SandboxID string `json:"sandbox_id"`
	ContextID string `json:"context_id"`
	// Created names what this call made: "sandbox" and "context", or
	// "context".
	Created []string `json:"created,omitempty"`
	// ExecutionCount counts the cells the context has run, this one
	// included.
	ExecutionCount int    `json:"execution_count"`
	Stdout         string `json:"stdout"`
	Stderr         string `json:"stderr"`
	// Truncated says that stdout or stderr was cut to its first and last
	// 16 KiB.
	Truncated bool         `json:"truncated,omitempty"`
	Results   []CellResult `json:"results"`
	Error     *CellError   `json:"error,omitempty"`
}

// CellResult is one result of a cell: the value of its last expression
// (is_main_result) or a display() call.
type CellResult struct {
	// MIMETypes lists every form the result has.
	MIMETypes []string `json:"mime_types"`
	// Data holds the textual forms (text/plain, text/html, ...) by MIME
	// type; images are the result's image content instead.
	Data   map[string]string `json:"data"`
	IsMain bool              `json:"is_main_result,omitempty"`
}

// CellError is the exception a cell ended with.
type CellError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// ForkContextArgs are the arguments of fork_context.
type ForkContextArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the live sandbox of the context"`
	ContextID string `json:"context_id" jsonschema:"the python context to copy"`
}

// ForkedContext is the structured result of fork_context.
type ForkedContext struct {
	SandboxID  string `json:"sandbox_id"`
	ContextID  string `json:"context_id"`
	ForkedFrom string `json:"forked_from"`
}

// CloseSandboxArgs are the arguments of close_sandbox.
type CloseSandboxArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the live sandbox to close"`
	ContextID string `json:"context_id,omitempty" jsonschema:"close only this code context; the sandbox and its other contexts live on"`
}

// Closed is the structured result of close_sandbox.
type Closed struct {
	SandboxID string `json:"sandbox_id"`
	ContextID string `json:"context_id,omitempty"`
	// Closed is what ended: "sandbox" or "context".
	Closed string `json:"closed"`
}

const runCellDescription = `Run code as the next cell of a code context in a live sandbox, like a notebook: variables, imports and functions persist from one call to the next in the same context.
Without sandbox_id the call creates a live sandbox and a context; without context_id it creates a context in the sandbox. Either way the result gives sandbox_id and context_id: pass both to later calls to keep the state.
The text result shows stdout, stderr, the value of the last expression ("result:"), each display() call, and an exception's name, value and traceback; images (a matplotlib figure, image/png) come as image content. A cell that raises is returned as a tool error; the context keeps its state. The structured result has the same parts.`

func (s *Server) addLiveTools() {
	no, yes := false, true
	addTool[CreateSandboxArgs, LiveSandbox](s, &gomcp.Tool{
		Name:  ToolCreateSandbox,
		Title: "Create a live sandbox",
		Description: `Create a live sandbox with one code context, for run_cell. The sandbox lives until its timeout or close_sandbox; files written under /workspace stay for its life.
Use it to choose the image, memory, network or lifetime; run_cell without sandbox_id creates one with the server's defaults.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Create a live sandbox", DestructiveHint: &no, OpenWorldHint: &yes},
	}, func(in *jsonschema.Schema) {
		in.Properties["tier"].Enum = []any{"container", "gvisor", "auto"}
		in.Properties["on_timeout"].Enum = []any{"kill", "pause"}
		for _, name := range []string{"timeout_seconds", "memory_mb", "cpu_cores", "cpus"} {
			in.Properties[name].ExclusiveMinimum = jsonschema.Ptr(0.0)
		}
	}, s.createSandbox)

	addTool[RunCellArgs, CellOutput](s, &gomcp.Tool{
		Name:        ToolRunCell,
		Title:       "Run a cell in a code context",
		Description: runCellDescription,
		Annotations: &gomcp.ToolAnnotations{Title: "Run a cell in a code context", DestructiveHint: &no, OpenWorldHint: &yes},
	}, func(in *jsonschema.Schema) {
		t := in.Properties["timeout_seconds"]
		t.Minimum, t.Maximum = jsonschema.Ptr(1.0), jsonschema.Ptr(maxCellTimeout.Seconds())
	}, s.runCell)

	addTool[ForkContextArgs, ForkedContext](s, &gomcp.Tool{
		Name:        ToolForkContext,
		Title:       "Fork a code context",
		Description: `Make a new python context holding a copy of another's state (variables, imports, functions), in milliseconds. Cells run in either one afterwards do not affect the other: try something in the fork and keep the original.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Fork a code context", DestructiveHint: &no, OpenWorldHint: &no},
	}, func(in *jsonschema.Schema) {
		minLen(in, "sandbox_id")
		minLen(in, "context_id")
	}, s.forkContext)

	addTool[CloseSandboxArgs, Closed](s, &gomcp.Tool{
		Name:  ToolCloseSandbox,
		Title: "Close a live sandbox",
		Description: `Close a live sandbox: its contexts, processes and files end. With context_id, close only that context.
Close what you no longer need; a sandbox left open ends at its timeout.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Close a live sandbox", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, func(in *jsonschema.Schema) { minLen(in, "sandbox_id") }, s.closeSandbox)
}

func (s *Server) createSandbox(ctx context.Context, a *CreateSandboxArgs) (*gomcp.CallToolResult, error) {
	lang := a.Language
	if lang == "" && a.SnapshotID == "" {
		lang = "python"
	}
	req := sandbox.CreateSandboxRequest{Language: lang, Image: a.Image, Tier: sandbox.Tier(a.Tier), TimeoutSeconds: a.TimeoutSeconds, Env: a.Env,
		Limits: sandbox.SandboxLimits{MemoryMB: a.MemoryMB, CPUCores: a.CPUCores, CPUs: a.CPUs}, SnapshotID: a.SnapshotID}
	if len(a.NetworkAllow) > 0 {
		req.Network = &sandbox.Network{Allow: a.NetworkAllow}
	}
	if a.OnTimeout != "" {
		req.Lifecycle = &sandbox.SandboxLifecycle{OnTimeout: a.OnTimeout}
	}
	sb, info, err := s.client.CreateSandbox(ctx, req)
	if err != nil {
		return s.callFailed(ToolCreateSandbox, err)
	}
	cc, err := s.firstContext(ctx, sb, lang, info)
	if err != nil {
		// The model never learns this sandbox's id: end it now.
		s.kill(ctx, sb)
		return s.callFailed(ToolCreateSandbox, err)
	}
	out := LiveSandbox{SandboxID: sb.ID, ContextID: cc.ID, Language: cc.Language, Image: info.Image, Tier: info.Tier, ExpiresAt: info.ExpiresAt}
	text := fmt.Sprintf("Created live sandbox %s (%s, image %s, %s tier) with %s context %s. It ends at %s (in %s) or at close_sandbox.\n"+
		"Run code with run_cell {\"sandbox_id\": %q, \"context_id\": %q, \"code\": ...}: variables persist between calls.",
		sb.ID, lang, info.Image, info.Tier, cc.Language, cc.ID, info.ExpiresAt.UTC().Format(time.RFC3339),
		time.Until(info.ExpiresAt).Round(time.Second), sb.ID, cc.ID)
	return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: text}}, StructuredContent: out}, nil
}

// firstContext is the context create_sandbox answers with: one the
// snapshot it was made from brought, else a new one of lang (default: the
// sandbox's language).
func (s *Server) firstContext(ctx context.Context, sb *sandbox.Sandbox, lang string, info *sandbox.Info) (*sandbox.CodeContext, error) {
	if info.Resume != nil && info.Resume.Contexts > 0 {
		if list, err := sb.Contexts(ctx); err == nil && len(list) > 0 {
			return &list[0], nil
		}
	}
	if lang == "" {
		lang = info.Language
	}
	return sb.CreateContext(ctx, sandbox.ContextRequest{Language: lang})
}

// kill ends a sandbox this call made and cannot hand over.
func (s *Server) kill(ctx context.Context, sb *sandbox.Sandbox) {
	kctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	if err := sb.Kill(kctx); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.Warn("kill a sandbox no client knows", "sandbox_id", sb.ID, "err", err)
	}
}

func (s *Server) runCell(ctx context.Context, a *RunCellArgs) (*gomcp.CallToolResult, error) {
	lang := a.Language
	if lang == "" {
		lang = "python"
	}
	out := CellOutput{SandboxID: a.SandboxID, ContextID: a.ContextID}
	var sb *sandbox.Sandbox
	made := false
	if a.SandboxID == "" {
		if a.ContextID != "" {
			return invalidArgs(ToolRunCell, &argError{field: "context_id", msg: "a context_id needs the sandbox_id it belongs to"}), nil
		}
		var err error
		if sb, _, err = s.client.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: lang}); err != nil {
			return s.callFailed(ToolRunCell, err)
		}
		made = true
		out.SandboxID = sb.ID
		out.Created = append(out.Created, "sandbox")
	} else {
		sb = s.client.Sandbox(a.SandboxID)
	}
	// failed answers a call that went wrong after this call made the
	// sandbox: the model never learns its id, so it ends now.
	failed := func(err error) (*gomcp.CallToolResult, error) {
		if made {
			s.kill(ctx, sb)
		}
		var ae *sandbox.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusOK {
			// The run began, then could not go on: its context or its
			// sandbox ended under it.
			return toolError(fmt.Sprintf("The cell could not finish (%s): %s. Omit context_id to run in a new context of the sandbox, "+
				"or sandbox_id as well for a new sandbox; the old state is gone.", ae.Code, ae.Message),
				errorData{Reason: ReasonInvalidArguments, Code: ae.Code}), nil
		}
		res, rerr := s.callFailed(ToolRunCell, err)
		if tc, ok := firstText(res); ok && errors.Is(err, sandbox.ErrNotFound) {
			tc.Text += " Omit context_id to run in a new context of the sandbox, or sandbox_id as well for a new sandbox; the old state is gone."
		}
		return res, rerr
	}
	if out.ContextID == "" {
		cc, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: lang})
		if err != nil {
			return failed(err)
		}
		out.ContextID = cc.ID
		out.Created = append(out.Created, "context")
	}
	timeout := defaultCellTimeout
	if a.TimeoutSeconds > 0 {
		timeout = time.Duration(a.TimeoutSeconds) * time.Second
	}
	ex, err := sb.RunCode(ctx, out.ContextID, a.Code, sandbox.RunCodeOptions{Timeout: timeout})
	if err != nil {
		if ctx.Err() != nil {
			// The client went away; the server interrupts the cell as the
			// connection closes. A sandbox this call made ends too.
			if made {
				s.kill(ctx, sb)
			}
			return nil, err
		}
		return failed(err)
	}
	return cellResult(out, ex), nil
}

// firstText is a result's first content, when it is text.
func firstText(res *gomcp.CallToolResult) (*gomcp.TextContent, bool) {
	if res == nil || len(res.Content) == 0 {
		return nil, false
	}
	tc, ok := res.Content[0].(*gomcp.TextContent)
	return tc, ok
}

// Error names the server gives itself: a cell past its timeout, and a
// cell whose context's process ended under it. Their values say whether
// the context kept its state.
const (
	errCellTimeout      = "TimeoutError"
	errContextRestarted = "ContextRestarted"
)

// cellResult is run_cell's answer: the summary as text, each image as
// image content, the parts as structured content, isError when the cell
// raised.
func cellResult(out CellOutput, ex *sandbox.Execution) *gomcp.CallToolResult {
	out.ExecutionCount = ex.ExecutionCount
	var cut1, cut2 bool
	out.Stdout, cut1 = clip(strings.Join(ex.Stdout, ""), maxStreamBytes)
	out.Stderr, cut2 = clip(strings.Join(ex.Stderr, ""), maxStreamBytes)
	out.Truncated = cut1 || cut2
	out.Results = []CellResult{}

	var b strings.Builder
	fmt.Fprintf(&b, "sandbox %s, context %s, cell %d", out.SandboxID, out.ContextID, out.ExecutionCount)
	switch len(out.Created) {
	case 2:
		b.WriteString(" (sandbox and context made by this call: pass both ids to run_cell to keep these variables)")
	case 1:
		b.WriteString(" (a new context: pass its id to run_cell to keep these variables)")
	}
	b.WriteString("\n")
	section(&b, "stdout", out.Stdout, cut1)
	section(&b, "stderr", out.Stderr, cut2)

	var pics []gomcp.Content
	picBytes := 0
	for _, r := range ex.Results {
		cr := CellResult{Data: map[string]string{}, IsMain: r.IsMain}
		var shown []string
		for _, mime := range slices.Sorted(maps.Keys(r.Data)) {
			cr.MIMETypes = append(cr.MIMETypes, mime)
			if !strings.HasPrefix(mime, "image/") || mime == "image/svg+xml" {
				cr.Data[mime] = r.Data[mime]
				continue
			}
			raw, err := base64.StdEncoding.DecodeString(r.Data[mime])
			if err != nil || !images[mime] {
				continue
			}
			if picBytes+len(raw) > maxImageBytes {
				shown = append(shown, mime+" not shown: over the 4 MiB of images one answer carries; save it to a file")
				continue
			}
			picBytes += len(raw)
			pics = append(pics, &gomcp.ImageContent{Data: raw, MIMEType: mime})
			shown = append(shown, mime+" attached as an image")
		}
		out.Results = append(out.Results, cr)
		label := "display"
		if r.IsMain {
			label = "result"
		}
		txt := r.Data["text/plain"]
		if _, ok := r.Data["text/html"]; ok {
			shown = append(shown, "text/html in the structured result")
		}
		if len(shown) > 0 {
			label += " [" + strings.Join(shown, "; ") + "]"
		}
		if strings.Contains(txt, "\n") {
			fmt.Fprintf(&b, "%s:\n%s\n", label, strings.TrimRight(txt, "\n"))
		} else {
			fmt.Fprintf(&b, "%s: %s\n", label, txt)
		}
	}
	if e := ex.Error; e != nil {
		out.Error = &CellError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
		if out.Error.Traceback == nil {
			out.Error.Traceback = []string{}
		}
		fmt.Fprintf(&b, "error: %s: %s\n", e.Name, e.Value)
		if len(e.Traceback) > 0 {
			tb, _ := clip(strings.Join(e.Traceback, ""), maxStreamBytes)
			b.WriteString("traceback:\n" + strings.TrimRight(tb, "\n") + "\n")
		}
		if e.Name != errContextRestarted && e.Name != errCellTimeout {
			b.WriteString("The context keeps its variables, those set before the error included; fix the code and run it again.\n")
		}
	}
	if ex.Error == nil && len(ex.Results) == 0 && out.Stdout == "" && out.Stderr == "" {
		b.WriteString("(no output and no value)\n")
	}
	content := append([]gomcp.Content{&gomcp.TextContent{Text: b.String()}}, pics...)
	return &gomcp.CallToolResult{Content: content, StructuredContent: out, IsError: ex.Error != nil}
}

// section writes a named block of output, if there is any.
func section(b *strings.Builder, name, text string, cut bool) {
	if text == "" {
		return
	}
	if cut {
		name += " (cut to its first and last 16 KiB)"
	}
	fmt.Fprintf(b, "%s:\n%s\n", name, strings.TrimRight(text, "\n"))
}

// clip keeps the first and last max/2 bytes of s (at character
// boundaries) with a marker between, when s is longer than max.
func clip(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	head, tail := max/2, len(s)-max/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return fmt.Sprintf("%s\n[… %d bytes cut …]\n%s", s[:head], tail-head, s[tail:]), true
}

func (s *Server) forkContext(ctx context.Context, a *ForkContextArgs) (*gomcp.CallToolResult, error) {
	cc, err := s.client.Sandbox(a.SandboxID).ForkContext(ctx, a.ContextID)
	if err != nil {
		return s.callFailed(ToolForkContext, err)
	}
	text := fmt.Sprintf("Forked context %s of sandbox %s into context %s: it holds a copy of the state; cells in one no longer affect the other.",
		a.ContextID, a.SandboxID, cc.ID)
	return &gomcp.CallToolResult{
		Content:           []gomcp.Content{&gomcp.TextContent{Text: text}},
		StructuredContent: ForkedContext{SandboxID: a.SandboxID, ContextID: cc.ID, ForkedFrom: a.ContextID},
	}, nil
}

func (s *Server) closeSandbox(ctx context.Context, a *CloseSandboxArgs) (*gomcp.CallToolResult, error) {
	sb := s.client.Sandbox(a.SandboxID)
	out := Closed{SandboxID: a.SandboxID, ContextID: a.ContextID}
	var text string
	if a.ContextID != "" {
		if err := sb.DeleteContext(ctx, a.ContextID); err != nil {
			return s.callFailed(ToolCloseSandbox, err)
		}
		out.Closed = "context"
		text = fmt.Sprintf("Closed context %s; sandbox %s and its other contexts live on.", a.ContextID, a.SandboxID)
	} else {
		if err := sb.Kill(ctx); err != nil {
			return s.callFailed(ToolCloseSandbox, err)
		}
		out.Closed = "sandbox"
		text = fmt.Sprintf("Closed sandbox %s: its contexts, processes and files are gone.", a.SandboxID)
	}
	return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: text}}, StructuredContent: out}, nil
}
