package engine

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/collect"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// InputDir is where input files appear in the sandbox.
const InputDir = "/workspace/input"

// FilesConfig bounds what comes in and goes out of a sandbox.
type FilesConfig struct {
	// MaxFiles caps a request's files; MaxFileBytes one file; MaxTotalBytes
	// all of them.
	MaxFiles                    int
	MaxFileBytes, MaxTotalBytes int64
	// FetchTimeout bounds one URL download, however slowly it drips.
	FetchTimeout time.Duration
	// Client downloads URL inputs; it should refuse private destinations
	// (netpolicy.Guard). Nil disables URL inputs.
	Client *http.Client
	// Artifacts bounds collection from /workspace/output.
	Artifacts collect.ArtifactLimits
	// ArtifactTTL is how long artifact links stay valid.
	ArtifactTTL time.Duration
}

// DefaultFilesConfig: 100 files, 100 MiB each, 500 MiB in all, 60 s a
// download; artifact links valid 15 minutes.
func DefaultFilesConfig() FilesConfig {
	return FilesConfig{MaxFiles: 100, MaxFileBytes: 100 << 20, MaxTotalBytes: 500 << 20,
		FetchTimeout: 60 * time.Second, Artifacts: collect.DefaultArtifactLimits(), ArtifactTTL: 15 * time.Minute}
}

// inputProblem is an input that cannot be used: the execution fails with
// input_error and nothing runs.
type inputProblem struct {
	file string
	msg  string
}

func (p *inputProblem) Error() string {
	if p.file == "" {
		return p.msg
	}
	return fmt.Sprintf("input file %q: %s", p.file, p.msg)
}

// inputs are files fetched to the host, ready to place.
type inputs struct {
	files []input
}

type input struct {
	path string // relative to InputDir
	tmp  string // host file holding the content
}

func (in inputs) remove() {
	for _, f := range in.files {
		os.Remove(f.tmp)
	}
}

// fetchInputs checks every file and fetches or decodes it to a host file,
// before any sandbox exists: a bad input costs nothing.
func (e *Engine) fetchInputs(ctx context.Context, files []sandbox.File) (inputs, error) {
	var in inputs
	if len(files) == 0 {
		return in, nil
	}
	c := e.cfg.Files
	if len(files) > c.MaxFiles {
		return in, &inputProblem{msg: fmt.Sprintf("%d files; at most %d", len(files), c.MaxFiles)}
	}
	seen := map[string]bool{}
	for _, f := range files {
		if err := validate.CheckInputPath(f.Path); err != nil {
			return in, &inputProblem{file: printablePath(f.Path), msg: err.Error()}
		}
		if seen[f.Path] {
			return in, &inputProblem{file: f.Path, msg: "given twice"}
		}
		seen[f.Path] = true
		if (f.URL == "") == (f.ContentBase64 == "") {
			return in, &inputProblem{file: f.Path, msg: "give exactly one of url and content_base64"}
		}
	}
	var total int64
	for _, f := range files {
		tmp, err := os.CreateTemp(e.scratch, "input-*")
		if err != nil {
			return in, fmt.Errorf("input scratch file: %w", err)
		}
		in.files = append(in.files, input{path: f.Path, tmp: tmp.Name()})
		var n int64
		if f.URL != "" {
			n, err = e.download(ctx, f.URL, tmp, min(c.MaxFileBytes, c.MaxTotalBytes-total))
		} else {
			n, err = decodeBase64(f.ContentBase64, tmp, min(c.MaxFileBytes, c.MaxTotalBytes-total))
		}
		if cerr := tmp.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write input: %w", cerr)
		}
		if err != nil {
			var p *inputProblem
			if errors.As(err, &p) {
				p.file = f.Path
			}
			return in, err
		}
		total += n
	}
	return in, nil
}

// errTooLarge marks an input over its cap.
var errTooLarge = errors.New("too large")

func decodeBase64(s string, w io.Writer, max int64) (int64, error) {
	if int64(base64.StdEncoding.DecodedLen(len(s))) > max+3 {
		return 0, &inputProblem{msg: fmt.Sprintf("larger than %d bytes", max)}
	}
	n, err := io.Copy(w, base64.NewDecoder(base64.StdEncoding, strings.NewReader(s)))
	if err != nil {
		return n, &inputProblem{msg: "content_base64 is not valid standard base64: " + err.Error()}
	}
	if n > max {
		return n, &inputProblem{msg: fmt.Sprintf("larger than %d bytes", max)}
	}
	return n, nil
}

// download streams url into w, refusing non-HTTP schemes, forbidden
// destinations (the client's guard), bodies over max and downloads slower
// than the fetch timeout.
func (e *Engine) download(ctx context.Context, raw string, w io.Writer, max int64) (int64, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, &inputProblem{msg: "url must be an absolute http or https URL"}
	}
	if e.cfg.Files.Client == nil {
		return 0, &inputProblem{msg: "this server does not fetch URLs; send content_base64"}
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Files.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return 0, &inputProblem{msg: "bad url: " + err.Error()}
	}
	req.Header.Set("User-Agent", "corral-fetch/1")
	resp, err := e.cfg.Files.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, &inputProblem{msg: fmt.Sprintf("download did not finish within %s", e.cfg.Files.FetchTimeout)}
		}
		return 0, &inputProblem{msg: "download failed: " + redact(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, &inputProblem{msg: "download answered " + resp.Status}
	}
	if resp.ContentLength > max {
		return 0, &inputProblem{msg: fmt.Sprintf("larger than %d bytes", max)}
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, max+1))
	switch {
	case n > max:
		return n, &inputProblem{msg: fmt.Sprintf("larger than %d bytes", max)}
	case err != nil && ctx.Err() != nil:
		return n, &inputProblem{msg: fmt.Sprintf("download did not finish within %s", e.cfg.Files.FetchTimeout)}
	case err != nil:
		return n, &inputProblem{msg: "download failed: " + redact(err)}
	}
	return n, nil
}

// redact keeps an error's message but not the URL's query (it may hold a
// token).
func redact(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " " + strings.SplitN(ue.URL, "?", 2)[0] + ": " + ue.Err.Error()
	}
	return err.Error()
}

// place writes the inputs into the sandbox through the agent, as the
// sandbox user, under /workspace/input.
func (in inputs) place(ctx context.Context, c *agent.Client) error {
	for _, f := range in.files {
		r, err := os.Open(f.tmp)
		if err != nil {
			return fmt.Errorf("open input: %w", err)
		}
		err = c.WriteFile(ctx, InputDir+"/"+f.path, 0o644, bufio.NewReaderSize(r, 256<<10))
		r.Close()
		var re *agent.RemoteError
		if errors.As(err, &re) {
			if msg := placeProblem(re); msg != "" {
				return &inputProblem{file: f.path, msg: msg}
			}
		}
		if err != nil {
			return fmt.Errorf("place input %s: %w", f.path, err)
		}
	}
	return nil
}

// placeProblem says why the agent could not write an input file, from the
// kind of its refusal (its own words come from inside the sandbox and are
// not the caller's to read); "" when the kind is not the input's problem.
func placeProblem(re *agent.RemoteError) string {
	switch {
	case errors.Is(re, syscall.ENOSPC), errors.Is(re, syscall.EDQUOT):
		return "does not fit: the sandbox's disk is full; raise limits.disk_mb or send smaller inputs"
	case errors.Is(re, syscall.EISDIR), errors.Is(re, syscall.ENOTDIR), errors.Is(re, syscall.EEXIST), errors.Is(re, agent.KindSymlink):
		return "could not be written in the sandbox: a directory, file or link the session's programs left is in its way"
	case errors.Is(re, syscall.EACCES), errors.Is(re, syscall.EPERM):
		return "could not be written in the sandbox: a program in the session took away the access to its directory"
	case errors.Is(re, syscall.ENAMETOOLONG):
		return "could not be written in the sandbox: the path is too long for its file system"
	}
	return ""
}

func printablePath(p string) string {
	p = strings.ToValidUTF8(p, "\uFFFD")
	if len(p) > 120 {
		p = p[:120] + "…"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, p)
}

// ArtifactStore keeps artifacts. Put streams r (size bytes) under key and
// returns the content's SHA-256 (hex); Link returns a download URL valid
// for ttl.
type ArtifactStore interface {
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (sha256 string, err error)
	Link(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error)
}

// collectArtifacts streams the regular files under /workspace/output to
// the artifact store (when the job has one), reading the sandbox's disk
// from the host without following any link; onlyNew: only those written
// since started (the workspace was there before the execution).
func (e *Engine) collectArtifacts(ctx context.Context, sb runtime.Sandbox, job *Job, onlyNew bool, started time.Time) ([]sandbox.Artifact, []sandbox.SkippedArtifact) {
	ws, ok := sb.(runtime.HostWorkspace)
	if !ok || job.Artifacts == nil {
		return nil, nil
	}
	lim := e.cfg.Files.Artifacts
	if onlyNew {
		lim.Since = started.Add(-time.Second)
	}
	var arts []sandbox.Artifact
	skipped, err := collect.CollectFiles(ctx, filepath.Clean(ws.WorkspaceDir()), lim, func(ctx context.Context, f collect.Found) error {
		head := make([]byte, 512)
		n, _ := io.ReadFull(f.File, head)
		head = head[:n]
		ctype := mime.TypeByExtension(path.Ext(f.Path))
		if ctype == "" {
			ctype = http.DetectContentType(head)
		}
		r := io.LimitReader(io.MultiReader(strings.NewReader(string(head)), f.File), f.Size)
		key := job.ArtifactPrefix + f.Path
		sum, err := job.Artifacts.Put(ctx, key, r, f.Size, ctype)
		if err != nil {
			return fmt.Errorf("store artifact %s: %w", f.Path, err)
		}
		arts = append(arts, sandbox.Artifact{Path: f.Path, Size: f.Size, MIME: ctype, SHA256: sum})
		return nil
	})
	if err != nil {
		e.log.ErrorContext(ctx, "collect artifacts", "execution_id", job.Req.ExecutionID, "err", err)
		skipped = append(skipped, collect.Skipped{Reason: "collection stopped: internal error"})
	}
	out := make([]sandbox.SkippedArtifact, len(skipped))
	for i, s := range skipped {
		out[i] = sandbox.SkippedArtifact{Path: s.Path, Reason: s.Reason}
	}
	return arts, out
}
