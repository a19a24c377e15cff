package envd

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

// TestUploadCutShort: an upload whose body ends before its Content-Length
// (the client gone mid-body) is answered 400 with E2B's error body, or
// the connection closed, in every form /files takes: octet-stream, gzip,
// multipart cut in a part's headers or in its data. No file is left and
// the sandbox serves on.
func TestUploadCutShort(t *testing.T) {
	h := newHarness(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(strings.Repeat("corral ", 1000)))
	_ = zw.Flush()
	part := "--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/workspace/cut.txt\"\r\n" +
		"Content-Type: application/octet-stream\r\n\r\nsome of the file"
	for _, c := range []struct {
		name, ctype, encoding, sent string
	}{
		{"octet-stream", "application/octet-stream", "", ""},
		{"gzip, in its header", "application/octet-stream", "gzip", "\x1f\x8b"},
		{"gzip, in its stream", "application/octet-stream", "gzip", gz.String()},
		{"multipart, in a part's headers", "multipart/form-data; boundary=xyz", "", "--xyz\r\nContent-Disp"},
		{"multipart, in a part's data", "multipart/form-data; boundary=xyz", "", part},
	} {
		t.Run(c.name, func(t *testing.T) {
			hdr := http.Header{"Content-Type": {c.ctype}}
			if c.encoding != "" {
				hdr.Set("Content-Encoding", c.encoding)
			}
			res := testenv.CutShort(t, h.base, "POST", "/files?path=/workspace/cut.txt", hdr, c.sent)
			if res == nil {
				return // closed without an answer
			}
			b, _ := io.ReadAll(res.Body)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if res.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Code != 400 || e.Message == "" {
				t.Errorf("%d %s; want 400 and E2B's error body", res.StatusCode, b)
			}
		})
	}
	if code, _, _ := h.download(t, "/workspace/cut.txt"); code != http.StatusNotFound {
		t.Errorf("a file cut short was kept: GET answered %d", code)
	}
	if code, body := h.upload(t, "/workspace/whole.txt", map[string][]byte{"whole.txt": []byte("whole")}); code != 200 {
		t.Errorf("an upload after them: %d %s", code, body)
	}
}
