package envd

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/sandbox"
)

// GET /files?path= streams a file of the sandbox; POST /files?path=
// writes files: a multipart body (each part named "file"; its file name is
// the path when the query has none) or, from envd 0.5.7 on, the raw bytes
// (application/octet-stream, optionally gzip-encoded). Both answer the
// files written as [{name, type, path}]. Errors are E2B's {code, message}.

// maxUploadParts bounds the files of one multipart upload.
const maxUploadParts = 1000

// writeInfo is one file an upload wrote.
type writeInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *service) fail(ctx context.Context, w http.ResponseWriter, err error) {
	f := classify(ctx, err, s.log)
	target.WriteError(w, f.status, f.msg)
}

// lazyWriter sends the success headers at the first byte of the file, so
// that an error before it (no such file) can still be answered as one.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/octet-stream")
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}

func (s *service) download(w http.ResponseWriter, r *http.Request) {
	t := tgt(r.Context())
	p := r.URL.Query().Get("path")
	if p == "" {
		s.fail(r.Context(), w, fault.New(fault.InvalidArgument, "path: name the file to read"))
		return
	}
	lw := &lazyWriter{w: w}
	sb, err := s.box(t)
	if err == nil {
		err = sb.ReadFile(r.Context(), home(p), lw)
	}
	switch {
	case err != nil && !lw.started:
		s.fail(r.Context(), w, err)
	case err != nil:
		// The status line is sent: the client sees the body cut short.
		s.log.Warn("envd: a download ended early", "sandbox", t.SandboxID, "err", err)
		panic(http.ErrAbortHandler)
	case !lw.started:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	}
}

func (s *service) upload(w http.ResponseWriter, r *http.Request) {
	for k := range r.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Metadata-") {
			// Keeping them is not supported: refused rather than lost.
			s.fail(r.Context(), w, fault.New(fault.InvalidArgument, "file metadata (X-Metadata- headers) is not supported by this server"))
			return
		}
	}
	query := home(r.URL.Query().Get("path"))
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		s.fail(r.Context(), w, fault.New(fault.InvalidArgument, "Content-Type: give multipart/form-data or application/octet-stream"))
		return
	}
	var out []writeInfo
	switch {
	case ct == "multipart/form-data":
		out, err = s.uploadParts(r, query, params["boundary"])
	case ct == "application/octet-stream":
		out, err = s.uploadRaw(w, r, query)
	default:
		target.WriteError(w, http.StatusUnsupportedMediaType, "Content-Type: give multipart/form-data or application/octet-stream")
		return
	}
	if err != nil {
		s.fail(r.Context(), w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// badUpload is an upload refused for its form, with a message for the
// client.
type badUpload struct{ msg string }

func (b badUpload) Error() string { return b.msg }

// Fault is b as an invalid argument.
func (b badUpload) Fault() *fault.Error { return fault.New(fault.InvalidArgument, b.msg) }

// uploadRaw writes the body, one file of at most httpbody.MaxFile bytes
// (decompressed: a small gzip body can hold a huge file).
func (s *service) uploadRaw(w http.ResponseWriter, r *http.Request, p string) ([]writeInfo, error) {
	t := tgt(r.Context())
	if p == "" {
		return nil, badUpload{"path: name the file to write"}
	}
	body := httpbody.Reader(w, r, httpbody.MaxFile)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, badUpload{"the body is not gzip, as Content-Encoding says"}
		}
		defer zr.Close()
		body = httpbody.Limit(zr, httpbody.MaxFile)
	default:
		return nil, badUpload{fmt.Sprintf("Content-Encoding %q: give gzip or none", enc)}
	}
	f, err := on(s, t, func(sb *live.Sandbox) (sandbox.SandboxFile, error) { return sb.WriteFile(r.Context(), p, body) })
	if err != nil {
		return nil, err
	}
	return []writeInfo{{Name: f.Name, Type: "file", Path: f.Path}}, nil
}

func (s *service) uploadParts(r *http.Request, query, boundary string) ([]writeInfo, error) {
	t := tgt(r.Context())
	if boundary == "" {
		return nil, badUpload{"Content-Type: the multipart boundary is missing"}
	}
	mr := multipart.NewReader(httpbody.Limit(r.Body, -1), boundary)
	out := []writeInfo{}
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		var fe fault.Faulter
		if errors.As(err, &fe) {
			return nil, err // the body, cut short
		}
		if err != nil {
			return nil, badUpload{"the multipart body is malformed"}
		}
		if part.FormName() != "file" {
			continue
		}
		if n >= maxUploadParts {
			return nil, badUpload{fmt.Sprintf("an upload holds at most %d files", maxUploadParts)}
		}
		p := query
		if p == "" {
			// The file name is the whole path (Part.FileName keeps only
			// its last element).
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p = home(dp["filename"])
		}
		if p == "" {
			return nil, badUpload{"path: name the file to write (in the query, or as the part's file name)"}
		}
		// Each file at most httpbody.MaxFile; a part cut short (no
		// closing boundary) is the client's, as a body cut short is.
		f, err := on(s, t, func(sb *live.Sandbox) (sandbox.SandboxFile, error) {
			return sb.WriteFile(r.Context(), p, httpbody.Limit(part, httpbody.MaxFile))
		})
		if err != nil {
			return nil, err
		}
		out = append(out, writeInfo{Name: f.Name, Type: "file", Path: f.Path})
	}
	if len(out) == 0 {
		return nil, badUpload{`the multipart body holds no part named "file"`}
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the status is sent; a failed write is a client gone
}
