package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/sandbox"
)

// decodeExecuteRequest is a submission's decoding as submit does it: the
// body read (at most max bytes), then parsed; a refusal as /v1 answers it.
func decodeExecuteRequest(r io.Reader, max int64) (sandbox.ExecuteRequest, *Error) {
	body, err := io.ReadAll(httpbody.Limit(r, max))
	var req sandbox.ExecuteRequest
	if err == nil {
		req, err = parseExecuteRequest(body)
	}
	if err != nil {
		return req, asError(context.Background(), err, slog.New(slog.DiscardHandler))
	}
	return req, nil
}

func TestDecodeExecuteRequest(t *testing.T) {
	cases := []struct {
		body   string
		status int
		field  string
	}{
		{`{"language":"python","code":"print(1)"}`, 0, ""},
		{`{"language":"python","code":"x","limits":{"timeout_ms":1000,"memory_mb":64,"cpu_cores":0.5,"disk_mb":100}}`, 0, ""},
		{``, 400, ""},
		{`   `, 400, ""},
		{`{`, 400, ""},
		{`[]`, 400, ""},
		{`null`, 0, ""}, // decodes to the zero request; the engine then names the missing language
		{`{"language":"python"} {"language":"python"}`, 400, ""},
		{`{"language":"python"} x`, 400, ""},
		{`{"language":"python"} }`, 400, ""},
		{`{"language":"python","limit":{"timeout_ms":5}}`, 400, "limit"},
		{`{"language":5}`, 400, "language"},
		{`{"language":"python","limits":{"timeout_ms":"soon"}}`, 400, "limits.timeout_ms"},
		{`{"language":"python","limits":{"memory_mb":1e99}}`, 400, "limits.memory_mb"},
		{`{"language":"python","env":{"A":1}}`, 400, "env"},
		{`{"language":"python","callback_url":"ftp://x"}`, 400, "callback_url"},
		{`{"language":"python","callback_url":"https://user:pw@x/"}`, 400, "callback_url"},
		{`{"language":"python","callback_url":"/relative"}`, 400, "callback_url"},
		{`{"language":"python","code":"` + strings.Repeat("x", 2000) + `"}`, 413, ""},
	}
	for _, c := range cases {
		_, err := decodeExecuteRequest(strings.NewReader(c.body), 1024)
		if c.status == 0 {
			if err != nil {
				t.Errorf("%.60s: %v", c.body, err)
			}
			continue
		}
		if err == nil || err.Status != c.status || err.Field != c.field {
			t.Errorf("%.60s: got %+v, want status %d field %q", c.body, err, c.status, c.field)
		}
	}
}

// FuzzDecodeExecuteRequest: any body yields a request or a 4xx error, never
// a panic or a 5xx.
func FuzzDecodeExecuteRequest(f *testing.F) {
	for _, s := range []string{`{"language":"python","code":"print(1)"}`, `{"limits":{"timeout_ms":-1}}`,
		`{"env":{"\u0000":"x"}}`, `{"files":[{"path":"../x","content_base64":"!!"}]}`, `{"callback_url":"http://[::1"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := decodeExecuteRequest(strings.NewReader(string(body)), 4096)
		if err != nil && (err.Status < 400 || err.Status > 499) {
			t.Errorf("status %d for %q", err.Status, body)
		}
		if err != nil && err.Status == http.StatusInternalServerError {
			t.Error("500")
		}
	})
}
