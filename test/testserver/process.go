package testserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Pid is the server process's id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// PeakRSS returns the server process's peak resident memory (VmHWM) in
// bytes.
func (s *Server) PeakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		s.t.Fatalf("read server status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	s.t.Fatal("no VmHWM")
	return 0
}

// Call sends a request with key (JSON-encoding body unless it is []byte or
// string) and decodes a JSON answer into out when out is not nil. It
// returns the status and the raw body.
func (s *Server) Call(key, method, path string, body any, out any) (int, []byte) {
	s.t.Helper()
	return do(s.t, s.HTTP, s.URL, key, method, path, body, out)
}

// Do is Call for a server at url, failing t.
func Do(t testing.TB, url, key, method, path string, body any, out any) (int, []byte) {
	t.Helper()
	return do(t, http.DefaultClient, url, key, method, path, body, out)
}

func do(t testing.TB, client *http.Client, url, key, method, path string, body any, out any) (int, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %.200q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, raw
}
