package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/sandbox"
	"github.com/google/jsonschema-go/jsonschema"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool names.
const (
	ToolRunCode      = "run_code"
	ToolGetExecution = "get_execution"
	ToolListFiles    = "list_files"
	ToolReadFile     = "read_file"
	ToolWriteFile    = "write_file"
)

// read_file caps what one call returns: a model's context is the limit,
// and a program can read a larger file itself.
const (
	defaultReadBytes = 256 << 10
	maxReadBytes     = 1 << 20
)

// RunCodeArgs are the arguments of run_code: the wire request's fields a
// model has a use for.
type RunCodeArgs struct {
	Language     string            `json:"language" jsonschema:"the language of code: python, javascript, bash, go or c"`
	Code         string            `json:"code" jsonschema:"the whole program's source; for go and c, a complete program with main"`
	SessionID    string            `json:"session_id,omitempty" jsonschema:"keep /workspace across calls: every call with the same id (letters, digits, . _ : -) shares its files until the session expires (1 h after its last use)"`
	Files        []InputFile       `json:"files,omitempty" jsonschema:"input files, placed under /workspace/input before the code runs"`
	Limits       *LimitArgs        `json:"limits,omitempty" jsonschema:"resource limits; omitted fields take the server's defaults (30 s, 512 MB, 1 CPU, 1024 MB disk)"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"environment variables for the program"`
	NetworkAllow []string          `json:"network_allow,omitempty" jsonschema:"domains the program may reach through the server's egress proxy, e.g. pypi.org or *.github.com; without it there is no network"`
	Image        string            `json:"image,omitempty" jsonschema:"the root filesystem to run in (e.g. python, with numpy, pandas and matplotlib); default: the server's choice for the language"`
}

// InputFile is one input file of run_code.
type InputFile struct {
	Path          string  `json:"path" jsonschema:"path under /workspace/input, e.g. data.csv"`
	Content       *string `json:"content,omitempty" jsonschema:"the file's text (give exactly one of content, content_base64 and url)"`
	ContentBase64 string  `json:"content_base64,omitempty" jsonschema:"the file's bytes, standard base64"`
	URL           string  `json:"url,omitempty" jsonschema:"an http(s) URL the server downloads the file from"`
}

// LimitArgs bound one run.
type LimitArgs struct {
	TimeoutMS int64   `json:"timeout_ms,omitempty" jsonschema:"wall-clock limit in milliseconds"`
	MemoryMB  int64   `json:"memory_mb,omitempty" jsonschema:"memory limit in MB; raise it after an oom"`
	CPUCores  float64 `json:"cpu_cores,omitempty" jsonschema:"CPU cores, e.g. 0.5 or 2"`
	DiskMB    int64   `json:"disk_mb,omitempty" jsonschema:"disk space for /workspace in MB"`
}

// GetExecutionArgs are the arguments of get_execution.
type GetExecutionArgs struct {
	ExecutionID string `json:"execution_id" jsonschema:"the execution's id (execution_id in a run_code result)"`
	Wait        bool   `json:"wait,omitempty" jsonschema:"if the execution is still queued or running, wait until it ends"`
}

// ListFilesArgs are the arguments of list_files.
type ListFilesArgs struct {
	SessionID string `json:"session_id" jsonschema:"the session whose workspace to list"`
	Path      string `json:"path,omitempty" jsonschema:"a directory relative to /workspace; empty: /workspace itself"`
}

// ReadFileArgs are the arguments of read_file.
type ReadFileArgs struct {
	SessionID string `json:"session_id" jsonschema:"the session whose workspace holds the file"`
	Path      string `json:"path" jsonschema:"the file, relative to /workspace, e.g. output/result.json"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes (default 262144, at most 1048576)"`
}

// WriteFileArgs are the arguments of write_file.
type WriteFileArgs struct {
	SessionID     string  `json:"session_id" jsonschema:"the session to write into; it is created if it does not exist"`
	Path          string  `json:"path" jsonschema:"the file, relative to /workspace; parent directories are created"`
	Content       *string `json:"content,omitempty" jsonschema:"the file's text (give exactly one of content and content_base64)"`
	ContentBase64 *string `json:"content_base64,omitempty" jsonschema:"the file's bytes, standard base64"`
}

// FileList is the structured result of list_files.
type FileList struct {
	SessionID string              `json:"session_id"`
	Path      string              `json:"path"`
	Entries   []sandbox.FileEntry `json:"entries"`
}

// FileContent is the structured result of read_file.
type FileContent struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	// MIMEType is sniffed from the content.
	MIMEType string `json:"mime_type"`
	// Encoding is utf-8 when Content is the text itself, base64 otherwise.
	Encoding string `json:"encoding"`
	Content  string `json:"content"`
	// Size counts the bytes returned; Truncated says the file has more.
	Size      int  `json:"size"`
	Truncated bool `json:"truncated"`
}

// FileWritten is the structured result of write_file.
type FileWritten struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Size      int    `json:"size"`
}

const runCodeDescription = `Run a program in an isolated Corral sandbox and wait for it to finish.
The text result is a short summary: on success the exit code, the first lines of stdout and the artifacts, and a "limits hit:" line if the process, memory or disk limit refused the program something although it exited 0; on failure the error type (compile_error, runtime_error, timeout, oom, resource_limit, input_error, internal_error, cancelled), stderr with the failing line, the exit code and what to do next. The structured result is the whole execution record (stdout, stderr, exit_code, duration_ms, peak_memory_mb, limits_hit, artifacts with download links).
A program that fails is returned as a tool error carrying that summary: fix the code, or the limit it names, and call again.
The program starts in /workspace with no network unless network_allow lists domains. Input files go to /workspace/input; files the program writes under /workspace/output come back as artifacts. Pass session_id to keep /workspace between calls and to use list_files, read_file and write_file on it.`

func (s *Server) addTools() {
	no, yes := false, true
	addTool[RunCodeArgs, sandbox.Result](s, &gomcp.Tool{
		Name:        ToolRunCode,
		Title:       "Run code in a sandbox",
		Description: runCodeDescription,
		Annotations: &gomcp.ToolAnnotations{Title: "Run code in a sandbox", DestructiveHint: &no, OpenWorldHint: &yes},
	}, func(in *jsonschema.Schema) {
		minLen(in, "language")
		l := in.Properties["limits"]
		for _, name := range []string{"timeout_ms", "memory_mb", "cpu_cores", "disk_mb"} {
			l.Properties[name].ExclusiveMinimum = jsonschema.Ptr(0.0)
		}
		f := in.Properties["files"].Items
		minLen(f, "path")
		f.Properties["url"].Format = "uri"
	}, s.runCode)

	addTool[GetExecutionArgs, sandbox.Result](s, &gomcp.Tool{
		Name:  ToolGetExecution,
		Title: "Get an execution",
		Description: `Get an execution's record by its id: the summary as text, the whole record as structured result.
A failed or cancelled execution is returned as a tool error carrying its summary. With wait, an execution that is still queued or running is waited for.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Get an execution", ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(in *jsonschema.Schema) { minLen(in, "execution_id") }, s.getExecution)

	addTool[ListFilesArgs, FileList](s, &gomcp.Tool{
		Name:        ToolListFiles,
		Title:       "List session files",
		Description: "List a directory of a session's /workspace: names, types (file, dir, symlink), sizes and modification times.",
		Annotations: &gomcp.ToolAnnotations{Title: "List session files", ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(in *jsonschema.Schema) { minLen(in, "session_id") }, s.listFiles)

	addTool[ReadFileArgs, FileContent](s, &gomcp.Tool{
		Name:  ToolReadFile,
		Title: "Read a session file",
		Description: `Read a file of a session's /workspace, such as one a program wrote under output/.
Text comes back as text; images (PNG, JPEG, GIF, WebP) as images; other bytes as base64. At most max_bytes are returned.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Read a session file", ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(in *jsonschema.Schema) {
		minLen(in, "session_id")
		minLen(in, "path")
		in.Properties["max_bytes"].Minimum = jsonschema.Ptr(1.0)
		in.Properties["max_bytes"].Maximum = jsonschema.Ptr(float64(maxReadBytes))
	}, s.readFile)

	addTool[WriteFileArgs, FileWritten](s, &gomcp.Tool{
		Name:        ToolWriteFile,
		Title:       "Write a session file",
		Description: `Write a file into a session's /workspace (creating the session and parent directories as needed, replacing an existing file), for a later run_code with the same session_id to use.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Write a session file", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, func(in *jsonschema.Schema) {
		minLen(in, "session_id")
		minLen(in, "path")
	}, s.writeFile)

	s.addLiveTools()
	s.addSnapshotTools()
}

func minLen(s *jsonschema.Schema, prop string) { s.Properties[prop].MinLength = jsonschema.Ptr(1) }

// addTool registers a tool whose input and output schemas are inferred from
// In and Out (then adjusted). Arguments that do not match the input schema
// are a tool error naming what is wrong; the handler sees only arguments
// that do.
func addTool[In, Out any](s *Server, t *gomcp.Tool, adjust func(*jsonschema.Schema), h func(context.Context, *In) (*gomcp.CallToolResult, error)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", t.Name, err))
	}
	adjust(in)
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", t.Name, err))
	}
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: output schema: %v", t.Name, err))
	}
	t.InputSchema, t.OutputSchema = in, out
	s.mcp.AddTool(t, func(ctx context.Context, req *gomcp.CallToolRequest) (*gomcp.CallToolResult, error) {
		start := time.Now()
		var res *gomcp.CallToolResult
		args, err := decodeArgs[In](resolved, req.Params.Arguments)
		if err != nil {
			res, err = invalidArgs(t.Name, err), nil
		} else {
			res, err = h(ctx, args)
		}
		s.logCall(ctx, t.Name, start, res, err)
		return res, err
	})
}

// decodeArgs checks raw against the input schema and decodes it, refusing
// unknown fields.
func decodeArgs[In any](rs *jsonschema.Resolved, raw json.RawMessage) (*In, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, &argError{msg: "not a JSON object: " + err.Error()}
	}
	if err := rs.Validate(v); err != nil {
		return nil, schemaError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	in := new(In)
	if err := dec.Decode(in); err != nil {
		return nil, &argError{msg: err.Error()}
	}
	return in, nil
}

// schemaError turns a validation error ("validating root: validating
// /properties/limits: validating /properties/limits/properties/memory_mb:
// exclusiveMinimum: ...") into the argument at fault and the problem.
func schemaError(err error) *argError {
	msg, field := err.Error(), ""
	for {
		//lint:allow-error-text jsonschema-go says where a value failed only in its error's text
		rest, ok := strings.CutPrefix(msg, "validating ")
		if !ok {
			break
		}
		where, after, found := strings.Cut(rest, ": ")
		if !found {
			break
		}
		if strings.HasPrefix(where, "/") {
			field = strings.TrimPrefix(where, "/properties/")
			field = strings.ReplaceAll(field, "/items", "[]")
			field = strings.ReplaceAll(field, "/properties/", ".")
			field = strings.ReplaceAll(field, "/additionalProperties", "{}")
		}
		msg = after
	}
	return &argError{field: field, msg: plainBound(msg)}
}

// bound matches jsonschema-go's messages for numeric bounds, whose numbers
// are rationals ("-1/1") and %f floats ("0.000000").
var bound = regexp.MustCompile(`^(minimum|maximum|exclusiveMinimum): (\S+) is (less than or equal to|less than|greater than) (\S+)$`)

// plainBound rewrites a bound violation as "minimum: -1 is less than 1".
func plainBound(msg string) string {
	m := bound.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	return fmt.Sprintf("%s: %s is %s %s", m[1], plainNumber(m[2]), m[3], plainNumber(m[4]))
}

func plainNumber(s string) string {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func (s *Server) runCode(ctx context.Context, a *RunCodeArgs) (*gomcp.CallToolResult, error) {
	req, err := a.request()
	if err != nil {
		return invalidArgs(ToolRunCode, err), nil
	}
	// Known before the call, so a client that gives up can cancel it.
	req.ExecutionID = sandbox.NewExecutionID()
	res, err := s.client.Execute(ctx, req)
	var sbErr *sandbox.Error
	switch {
	case err == nil:
	case errors.As(err, &sbErr):
		if res == nil {
			res = sbErr.Result
		}
	case ctx.Err() != nil:
		s.cancel(ctx, req.ExecutionID)
		return nil, err
	default:
		return s.callFailed(ToolRunCode, err)
	}
	return recordResult(res), nil
}

// cancel stops an execution whose caller went away, as corral exec does on
// Ctrl-C, so it does not run on for nobody.
func (s *Server) cancel(ctx context.Context, id string) {
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	if err := s.client.Cancel(cctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.Warn("cancel an abandoned execution", "execution_id", id, "err", err)
		return
	}
	s.log.Info("cancelled an abandoned execution", "execution_id", id)
}

// request turns the arguments into a wire request.
func (a *RunCodeArgs) request() (sandbox.ExecuteRequest, error) {
	req := sandbox.ExecuteRequest{Language: a.Language, Code: a.Code, SessionID: a.SessionID, Env: a.Env, Image: a.Image}
	if l := a.Limits; l != nil {
		req.Limits = sandbox.Limits{TimeoutMS: l.TimeoutMS, MemoryMB: l.MemoryMB, CPUCores: l.CPUCores, DiskMB: l.DiskMB}
	}
	if len(a.NetworkAllow) > 0 {
		req.Network = &sandbox.Network{Allow: a.NetworkAllow}
	}
	for i, f := range a.Files {
		field := fmt.Sprintf("files[%d]", i)
		given := 0
		for _, set := range []bool{f.Content != nil, f.ContentBase64 != "", f.URL != ""} {
			if set {
				given++
			}
		}
		if given != 1 {
			return req, &argError{field: field, msg: "give exactly one of content, content_base64 and url"}
		}
		wf := sandbox.File{Path: f.Path, URL: f.URL, ContentBase64: f.ContentBase64}
		switch {
		case f.Content != nil:
			wf.ContentBase64 = base64.StdEncoding.EncodeToString([]byte(*f.Content))
		case f.ContentBase64 != "":
			if _, err := base64.StdEncoding.DecodeString(f.ContentBase64); err != nil {
				return req, &argError{field: field + ".content_base64", msg: "not standard base64: " + err.Error()}
			}
		}
		req.Files = append(req.Files, wf)
	}
	return req, nil
}

func (s *Server) getExecution(ctx context.Context, a *GetExecutionArgs) (*gomcp.CallToolResult, error) {
	var res *sandbox.Result
	var err error
	if a.Wait {
		res, err = s.client.Wait(ctx, a.ExecutionID)
	} else {
		res, err = s.client.GetExecution(ctx, a.ExecutionID)
	}
	var sbErr *sandbox.Error
	if errors.As(err, &sbErr) {
		if res == nil {
			res = sbErr.Result
		}
		err = nil
	}
	if err != nil {
		return s.callFailed(ToolGetExecution, err)
	}
	return recordResult(res), nil
}

// recordResult is the answer for an execution record: the summary as
// text, the record as structured content, and isError when it ended
// without success.
func recordResult(r *sandbox.Result) *gomcp.CallToolResult {
	text := r.Summary
	switch {
	case !r.Status.Final():
		text = fmt.Sprintf("Execution %s is %s. Call %s with wait=true to wait for its result.", r.ExecutionID, r.Status, ToolGetExecution)
	case text == "":
		// A server that predates summaries: the record itself.
		b, _ := json.MarshalIndent(r, "", "  ")
		text = string(b)
	}
	return &gomcp.CallToolResult{
		Content:           []gomcp.Content{&gomcp.TextContent{Text: text}},
		StructuredContent: r,
		IsError:           r.Status.Final() && r.Status != sandbox.StatusSuccess,
	}
}

// workspacePath accepts a path relative to /workspace, or an absolute one
// inside it (models often write those).
func workspacePath(p string) string {
	if rest, ok := strings.CutPrefix(p, "/workspace"); ok && (rest == "" || rest[0] == '/') {
		return strings.TrimPrefix(rest, "/")
	}
	return p
}

func (s *Server) listFiles(ctx context.Context, a *ListFilesArgs) (*gomcp.CallToolResult, error) {
	dir := strings.Trim(workspacePath(a.Path), "/")
	entries, err := s.client.ListFiles(ctx, a.SessionID, dir)
	if err != nil {
		return s.callFailed(ToolListFiles, err)
	}
	if entries == nil {
		entries = []sandbox.FileEntry{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "/workspace/%s in session %s: %d entries\n", dir, a.SessionID, len(entries))
	for _, e := range entries {
		switch {
		case e.Dir || e.Type == "dir":
			fmt.Fprintf(&b, "%s/\n", e.Name)
		case e.Type == "file" || e.Type == "":
			fmt.Fprintf(&b, "%s (%d bytes)\n", e.Name, e.Size)
		default:
			fmt.Fprintf(&b, "%s (%s)\n", e.Name, e.Type)
		}
	}
	return &gomcp.CallToolResult{
		Content:           []gomcp.Content{&gomcp.TextContent{Text: b.String()}},
		StructuredContent: FileList{SessionID: a.SessionID, Path: dir, Entries: entries},
	}, nil
}

// errCapped stops a download at the caller's limit.
var errCapped = errors.New("file larger than max_bytes")

// capWriter keeps up to max+1 bytes, so the caller learns whether there
// was more, and then stops the copy.
type capWriter struct {
	buf []byte
	max int
}

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.max + 1 - len(w.buf)
	if len(p) > room {
		w.buf = append(w.buf, p[:room]...)
		return room, errCapped
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// images are the types a client shows to a model as an image.
var images = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

func (s *Server) readFile(ctx context.Context, a *ReadFileArgs) (*gomcp.CallToolResult, error) {
	p := workspacePath(a.Path)
	limit := a.MaxBytes
	if limit == 0 {
		limit = defaultReadBytes
	}
	w := &capWriter{max: limit}
	err := s.client.Download(ctx, a.SessionID, p, w)
	truncated := errors.Is(err, errCapped)
	if err != nil && !truncated {
		return s.callFailed(ToolReadFile, err)
	}
	data := w.buf
	if truncated {
		data = data[:limit]
	}
	fc := FileContent{SessionID: a.SessionID, Path: p, MIMEType: http.DetectContentType(data), Size: len(data), Truncated: truncated}
	var content []gomcp.Content
	if text, ok := asText(data, truncated); ok {
		fc.Encoding, fc.Content = "utf-8", text
		content = append(content, &gomcp.TextContent{Text: text})
	} else {
		fc.Encoding, fc.Content = "base64", base64.StdEncoding.EncodeToString(data)
		mime, _, _ := strings.Cut(fc.MIMEType, ";")
		if images[mime] && !truncated {
			content = append(content, &gomcp.ImageContent{Data: data, MIMEType: mime},
				&gomcp.TextContent{Text: fmt.Sprintf("/workspace/%s: %s, %d bytes", p, mime, len(data))})
		} else {
			content = append(content, &gomcp.TextContent{Text: fmt.Sprintf("/workspace/%s is binary (%s); its %d bytes in base64:\n%s", p, fc.MIMEType, len(data), fc.Content)})
		}
	}
	if truncated {
		content = append(content, &gomcp.TextContent{Text: fmt.Sprintf("[truncated: these are the first %d bytes of /workspace/%s; pass a larger max_bytes (at most %d) or read it in a program]", limit, p, maxReadBytes)})
	}
	return &gomcp.CallToolResult{Content: content, StructuredContent: fc}, nil
}

// asText returns data as text when it is UTF-8 (a truncated file may end
// inside a character) without NUL bytes.
func asText(data []byte, truncated bool) (string, bool) {
	if truncated {
		for i := 0; i < utf8.UTFMax && len(data) > 0; i++ {
			if r, size := utf8.DecodeLastRune(data); r != utf8.RuneError || size != 1 {
				break
			}
			data = data[:len(data)-1]
		}
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return "", false
	}
	return string(data), true
}

func (s *Server) writeFile(ctx context.Context, a *WriteFileArgs) (*gomcp.CallToolResult, error) {
	var data []byte
	switch {
	case (a.Content == nil) == (a.ContentBase64 == nil):
		return invalidArgs(ToolWriteFile, &argError{msg: "give exactly one of content and content_base64"}), nil
	case a.Content != nil:
		data = []byte(*a.Content)
	default:
		var err error
		if data, err = base64.StdEncoding.DecodeString(*a.ContentBase64); err != nil {
			return invalidArgs(ToolWriteFile, &argError{field: "content_base64", msg: "not standard base64: " + err.Error()}), nil
		}
	}
	p := workspacePath(a.Path)
	if err := s.client.Upload(ctx, a.SessionID, p, bytes.NewReader(data)); err != nil {
		return s.callFailed(ToolWriteFile, err)
	}
	return &gomcp.CallToolResult{
		Content:           []gomcp.Content{&gomcp.TextContent{Text: fmt.Sprintf("Wrote %d bytes to /workspace/%s in session %s.", len(data), p, a.SessionID)}},
		StructuredContent: FileWritten{SessionID: a.SessionID, Path: p, Size: len(data)},
	}, nil
}

// logCall writes the one line per tool call.
func (s *Server) logCall(ctx context.Context, tool string, start time.Time, res *gomcp.CallToolResult, err error) {
	attrs := []any{"tool", tool, "duration_ms", time.Since(start).Milliseconds()}
	if res != nil {
		switch r := res.StructuredContent.(type) {
		case *sandbox.Result:
			attrs = append(attrs, "execution_id", r.ExecutionID, "session_id", r.SessionID, "status", r.Status)
		case CellOutput:
			attrs = append(attrs, "sandbox_id", r.SandboxID, "context_id", r.ContextID, "execution_count", r.ExecutionCount)
		case LiveSandbox:
			attrs = append(attrs, "sandbox_id", r.SandboxID, "context_id", r.ContextID)
		}
	}
	switch {
	case err != nil:
		s.log.InfoContext(ctx, "tool call abandoned", append(attrs, "err", err)...)
	case res.IsError:
		attrs = append(attrs, "outcome", "tool_error")
		if d, ok := res.Meta[MetaError].(errorData); ok {
			attrs = append(attrs, "reason", d.Reason)
			if d.Field != "" {
				attrs = append(attrs, "field", d.Field)
			}
		}
		s.log.InfoContext(ctx, "tool call", attrs...)
	default:
		s.log.InfoContext(ctx, "tool call", append(attrs, "outcome", "ok")...)
	}
}
