package envd

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// serverFaults are the Connect codes that say the server failed, not the
// request: a body the client got wrong must never be answered with them.
var serverFaults = []string{"internal", "unknown", "data_loss"}

// FuzzConnect: any body sent to any Connect procedure, as a unary call
// (application/json) or as a stream's envelopes (application/connect+json),
// is answered with a client's Connect error or the sandbox's absence, never
// a panic, a 5xx other than the absent sandbox's 503, or a code that says
// the server failed; a stream's answer is whole envelopes ending with an
// end-of-stream one. The sandbox named is not there, so a request that
// decodes does nothing.
func FuzzConnect(f *testing.F) {
	seeds := [][]byte{
		[]byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false}`),
		[]byte(`{"path":"/workspace","depth":2}`), []byte(`{}`), nil,
		envelope(0, []byte(`{"path":"/workspace","depth":2}`)),
		// testdata/fuzz/FuzzConnect holds the malformed envelopes.
	}
	for _, s := range seeds {
		f.Add(s)
	}
	log := slog.New(slog.DiscardHandler)
	table, err := workspace.Open(f.Context(), workspace.Config{Dir: f.TempDir(), ReapInterval: time.Hour}, oneNode{}, log)
	if err != nil {
		f.Fatal(err)
	}
	svc := newService(live.New(live.DefaultConfig(), live.Deps{Table: table, Publisher: oneNode{}, Log: log}), log)
	var procedures []string
	for p := range svc.processHandlers(nil) {
		procedures = append(procedures, p)
	}
	for p := range svc.filesystemHandlers(nil) {
		procedures = append(procedures, p)
	}
	slices.Sort(procedures)
	h := svc.handler()
	ctx := target.With(f.Context(), target.Target{Tenant: "t", SandboxID: "absent"})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range procedures {
			for _, ct := range []string{"application/json", "application/connect+json"} {
				r := httptest.NewRequestWithContext(ctx, "POST", p, bytes.NewReader(body))
				r.Header.Set("Content-Type", ct)
				r.Header.Set("Connect-Protocol-Version", "1")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if err := connectAnswer(w, ct == "application/connect+json"); err != nil {
					t.Fatalf("%s %s %q: %v", p, ct, body, err)
				}
			}
		}
	})
}

// connectAnswer checks an answer of a Connect procedure to a request the
// server cannot act on (see FuzzConnect).
func connectAnswer(w *httptest.ResponseRecorder, stream bool) error {
	code := func(raw []byte) (string, error) {
		var e struct {
			Code  string `json:"code"`
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return "", fmt.Errorf("the error %q is not JSON", raw)
		}
		if e.Error != nil {
			return e.Error.Code, nil
		}
		return e.Code, nil
	}
	if w.Code != http.StatusOK || !stream {
		if w.Code == http.StatusOK {
			return fmt.Errorf("a call on an absent sandbox answered 200: %s", w.Body)
		}
		if w.Code == http.StatusUnsupportedMediaType {
			return nil // the other kind of procedure
		}
		c, err := code(w.Body.Bytes())
		if err != nil {
			return fmt.Errorf("%d: %w", w.Code, err)
		}
		if slices.Contains(serverFaults, c) || (w.Code >= 500 && c != "unavailable") || c == "" {
			return fmt.Errorf("%d %s: %s", w.Code, c, w.Body)
		}
		return nil
	}
	b := w.Body.Bytes()
	for len(b) > 0 {
		if len(b) < 5 || uint32(len(b)-5) < binary.BigEndian.Uint32(b[1:5]) {
			return fmt.Errorf("the answer holds a broken envelope: %q", w.Body)
		}
		flags, msg := b[0], b[5:5+binary.BigEndian.Uint32(b[1:5])]
		b = b[5+len(msg):]
		if flags&2 == 0 {
			continue
		}
		if len(b) != 0 {
			return fmt.Errorf("envelopes after the end of the stream: %q", w.Body)
		}
		c, err := code(msg)
		if err != nil {
			return err
		}
		if slices.Contains(serverFaults, c) {
			return fmt.Errorf("the stream ended with %s: %s", c, msg)
		}
		return nil
	}
	return fmt.Errorf("the stream has no end: %q", w.Body)
}

// FuzzUpload: any upload to POST /files (multipart, raw, gzip-encoded raw)
// with any path is written or refused with E2B's 4xx error, never a panic
// or a 5xx; a raw upload written reads back the same through GET /files.
// The sandbox is a fake one (its files are a directory of the host): the
// paths are the sandbox's, and the agent confines them there.
func FuzzUpload(f *testing.F) {
	f.Add(uint8(0), "/workspace/a.txt", []byte("hello"))
	f.Add(uint8(1), "b.txt", []byte("hello"))
	f.Add(uint8(2), "/tmp/c.bin", []byte{0, 1, 2, 0xff})
	f.Add(uint8(1), "", []byte("x"))
	f.Add(uint8(3), "", []byte("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.txt\"\r\n\r\nx\r\n--b--\r\n"))
	// testdata/fuzz/FuzzUpload holds the hostile ones.
	fk := testenv.FakeEngine(f, func(c *engine.Config) { c.CacheDir = "" })
	h := harnessOn(f, fk.Engine, fk.Fleet, sandbox.IsolationContainer, live.DefaultConfig())
	f.Fuzz(func(t *testing.T, form uint8, path string, data []byte) {
		body, ct, enc := data, "application/octet-stream", ""
		switch form % 4 {
		case 0: // multipart, the data one file part
			var b bytes.Buffer
			mw := multipart.NewWriter(&b)
			fw, err := mw.CreateFormFile("file", path)
			if err != nil {
				t.Fatal(err)
			}
			fw.Write(data)
			mw.Close()
			body, ct = b.Bytes(), mw.FormDataContentType()
		case 2:
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(data)
			zw.Close()
			body, enc = b.Bytes(), "gzip"
		case 3: // multipart, the data the whole body
			ct = "multipart/form-data; boundary=b"
		}
		req, err := http.NewRequestWithContext(t.Context(), "POST", h.base+"/files?path="+url.QueryEscape(path), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if res.StatusCode < 400 || res.StatusCode > 499 || json.Unmarshal(got, &e) != nil || e.Code != res.StatusCode {
				t.Fatalf("form %d path %q: %d %s", form%4, path, res.StatusCode, got)
			}
			return
		}
		var written []writeInfo
		if err := json.Unmarshal(got, &written); err != nil || len(written) == 0 {
			t.Fatalf("form %d path %q: 200 %s", form%4, path, got)
		}
		if form%4 == 3 {
			return
		}
		back, err := http.Get(h.base + "/files?path=" + url.QueryEscape(written[0].Path))
		if err != nil {
			t.Fatal(err)
		}
		read, _ := io.ReadAll(back.Body)
		back.Body.Close()
		if back.StatusCode != http.StatusOK || !bytes.Equal(read, data) {
			t.Fatalf("form %d path %q: wrote %q to %s, read %d %q", form%4, path, data, written[0].Path, back.StatusCode, read)
		}
	})
}
