package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Code contexts: interpreters in a live sandbox whose variables, imports
// and functions persist from one run to the next (POST
// /v1/sandboxes/{id}/contexts). A context lives as long as its sandbox's
// sandbox: one made again after it died has lost its contexts.

// ContextRequest describes a code context to create.
type ContextRequest struct {
	// Language is python (the default), bash or javascript.
	Language string `json:"language,omitempty"`
	// Cwd is the working directory, absolute; /workspace if empty.
	Cwd string `json:"cwd,omitempty"`
	// Env adds to the sandbox's environment.
	Env map[string]string `json:"env,omitempty"`
}

// CodeContext describes a code context.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// ContextList is the answer of GET /v1/sandboxes/{id}/contexts.
type ContextList struct {
	Contexts []CodeContext `json:"contexts"`
}

// RunCodeRequest is the body of POST /v1/sandboxes/{id}/contexts/{cid}/run.
type RunCodeRequest struct {
	Code string `json:"code"`
	// TimeoutSeconds bounds the cell (0: none); past it the cell is
	// interrupted and its error is a TimeoutError.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// Context event types, in the order a cell sends them:
// number_of_executions first, end_of_execution last.
const (
	ContextEventStdout             = "stdout"
	ContextEventStderr             = "stderr"
	ContextEventResult             = "result"
	ContextEventError              = "error"
	ContextEventNumberOfExecutions = "number_of_executions"
	ContextEventEndOfExecution     = "end_of_execution"
)

// ContextEvent is one thing a cell produced.
type ContextEvent struct {
	Type string `json:"type"`
	// Text is a stdout or stderr chunk.
	Text string `json:"text,omitempty"`
	// Data is a result's MIME bundle: MIME type → data, base64 for binary
	// types (image/png).
	Data map[string]string `json:"data,omitempty"`
	// IsMain marks the result of the cell's last expression.
	IsMain bool `json:"is_main_result,omitempty"`
	// Name, Value and Traceback describe an error.
	Name      string   `json:"name,omitempty"`
	Value     string   `json:"value,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
	// ExecutionCount is the context's count of cells run, this one
	// included (number_of_executions).
	ExecutionCount int `json:"execution_count,omitempty"`
}

// ContextEventList is the answer of a run asked with Accept:
// application/json.
type ContextEventList struct {
	Events []ContextEvent `json:"events"`
}

// CellResult is one result of a cell: a MIME bundle.
type CellResult struct {
	Data   map[string]string
	IsMain bool
}

// Text is the result's text/plain form.
func (r CellResult) Text() string { return r.Data["text/plain"] }

// CellError is the error a cell ended with.
type CellError struct {
	Name      string
	Value     string
	Traceback []string
}

// Execution is what a cell produced, collected (E2B's Execution).
type Execution struct {
	Results        []CellResult
	Stdout, Stderr []string
	Error          *CellError
	ExecutionCount int
}

// Text is the text/plain form of the cell's main result ("" if none).
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMain {
			return r.Text()
		}
	}
	return ""
}

// Add adds one event to the execution.
func (e *Execution) Add(ev ContextEvent) {
	switch ev.Type {
	case ContextEventStdout:
		e.Stdout = append(e.Stdout, ev.Text)
	case ContextEventStderr:
		e.Stderr = append(e.Stderr, ev.Text)
	case ContextEventResult:
		e.Results = append(e.Results, CellResult{Data: ev.Data, IsMain: ev.IsMain})
	case ContextEventError:
		e.Error = &CellError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback}
	case ContextEventNumberOfExecutions:
		e.ExecutionCount = ev.ExecutionCount
	}
}

// RunCodeOptions tune a run.
type RunCodeOptions struct {
	// Timeout bounds the cell (whole seconds; 0: none).
	Timeout time.Duration
	// OnEvent, if set, is called with each event as it comes.
	OnEvent func(ContextEvent)
}

func (s *Sandbox) contextPath(cid string) string {
	return s.path() + "/contexts/" + url.PathEscape(cid)
}

// CreateContext makes a code context in the sandbox.
func (s *Sandbox) CreateContext(ctx context.Context, req ContextRequest) (*CodeContext, error) {
	var out CodeContext
	if err := s.c.call(ctx, http.MethodPost, s.path()+"/contexts", req, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// Contexts lists the sandbox's code contexts, oldest first.
func (s *Sandbox) Contexts(ctx context.Context) ([]CodeContext, error) {
	var out ContextList
	if err := s.c.call(ctx, http.MethodGet, s.path()+"/contexts", nil, &out, true); err != nil {
		return nil, err
	}
	return out.Contexts, nil
}

// DeleteContext ends a code context.
func (s *Sandbox) DeleteContext(ctx context.Context, contextID string) error {
	return s.c.call(ctx, http.MethodDelete, s.contextPath(contextID), nil, nil, true)
}

// RestartContext gives a code context a fresh interpreter; its state is
// lost.
func (s *Sandbox) RestartContext(ctx context.Context, contextID string) error {
	return s.c.call(ctx, http.MethodPost, s.contextPath(contextID)+"/restart", nil, nil, false)
}

// InterruptContext interrupts the context's running cell (Python raises
// KeyboardInterrupt in it).
func (s *Sandbox) InterruptContext(ctx context.Context, contextID string) error {
	return s.c.call(ctx, http.MethodPost, s.contextPath(contextID)+"/interrupt", nil, nil, false)
}

// ForkContext makes a new context holding a copy of the context's state.
func (s *Sandbox) ForkContext(ctx context.Context, contextID string) (*CodeContext, error) {
	var out CodeContext
	if err := s.c.call(ctx, http.MethodPost, s.contextPath(contextID)+"/fork", nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunCode runs code as the next cell of the context, calls opts.OnEvent
// with each event as it comes and returns them collected. A cell that
// fails still returns an Execution (its Error set) and a nil error. The
// call is sent once, never retried.
func (s *Sandbox) RunCode(ctx context.Context, contextID, code string, opts RunCodeOptions) (*Execution, error) {
	var ex Execution
	for ev, err := range s.RunCodeEvents(ctx, contextID, code, opts.Timeout) {
		if err != nil {
			return nil, err
		}
		if opts.OnEvent != nil {
			opts.OnEvent(ev)
		}
		ex.Add(ev)
	}
	return &ex, nil
}

// RunCodeEvents runs code as the next cell of the context and yields its
// events as they come (over Server-Sent Events); the last is
// end_of_execution. The call is sent once, never retried.
func (s *Sandbox) RunCodeEvents(ctx context.Context, contextID, code string, timeout time.Duration) iter.Seq2[ContextEvent, error] {
	return func(yield func(ContextEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		body, err := json.Marshal(RunCodeRequest{Code: code, TimeoutSeconds: int64(timeout / time.Second)})
		if err != nil {
			yield(ContextEvent{}, fmt.Errorf("corral: encode run: %w", err))
			return
		}
		r := request{method: http.MethodPost, path: s.contextPath(contextID) + "/run", body: body,
			header: http.Header{"Accept": {"text/event-stream"}}}
		resp, err := s.c.do(ctx, r)
		if err != nil {
			yield(ContextEvent{}, err)
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		var data strings.Builder
		typ := ""
		for {
			line, err := readLine(br)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				yield(ContextEvent{}, &TransportError{Op: "POST " + r.path, Err: err})
				return
			}
			if v, ok := strings.CutPrefix(line, "event:"); ok {
				typ = strings.TrimSpace(v)
				continue
			}
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data.WriteString(strings.TrimPrefix(v, " "))
				continue
			}
			if line != "" || data.Len() == 0 {
				continue
			}
			raw := data.String()
			data.Reset()
			if typ == "failure" {
				// The run could not go on (its context was deleted, the
				// sandbox ended): an error answer in the stream.
				var body struct {
					Error struct {
						Code    string `json:"code"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(raw), &body); err != nil {
					yield(ContextEvent{}, &TransportError{Op: "POST " + r.path, Err: fmt.Errorf("decode failure: %w", err)})
					return
				}
				yield(ContextEvent{}, &APIError{Status: http.StatusOK, Code: body.Error.Code, Message: body.Error.Message})
				return
			}
			var ev ContextEvent
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				yield(ContextEvent{}, &TransportError{Op: "POST " + r.path, Err: fmt.Errorf("decode event: %w", err)})
				return
			}
			if !yield(ev, nil) || ev.Type == ContextEventEndOfExecution {
				return
			}
		}
	}
}
