package sandboxes

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestPorts: servers a program starts in a live sandbox (runc) answer from
// outside through Corral's listener. A sandbox made through E2B's API
// runs python's http.server on 8000 and a WebSocket echo server (stdlib
// python, testdata/ws_echo.py) on 8765; a 1 KiB file comes whole through
// E2B's header form, its host form (Host set directly: no DNS) and /v1's
// route; a WebSocket round trip works through the header form and the
// route; a missing traffic token is 403, a wrong one 502 as for a sandbox
// gone; a port nothing listens
// on is 502 with the reason; `corral sandbox url` prints both forms.
func TestPorts(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true, Config: "\n[e2b]\ndomain = \"sb.test\"\ntier = \"container\"\n"})
	do := func(req *http.Request) (int, []byte) {
		t.Helper()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", req.Method, req.URL, err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b
	}
	request := func(method, path string, body []byte, h ...string) *http.Request {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(h); i += 2 {
			if h[i] == "Host" {
				req.Host = h[i+1]
			} else {
				req.Header.Set(h[i], h[i+1])
			}
		}
		return req
	}
	code, b := do(request("POST", "/sandboxes", []byte(`{"templateID":"base","timeout":600}`), "X-API-Key", testserver.AlphaE2BKey))
	var sbx struct {
		SandboxID, TrafficAccessToken string
	}
	if code != http.StatusCreated || json.Unmarshal(b, &sbx) != nil || sbx.TrafficAccessToken == "" {
		t.Fatalf("create: %d %s", code, b)
	}
	id, token := sbx.SandboxID, sbx.TrafficAccessToken
	defer do(request("DELETE", "/sandboxes/"+id, nil, "X-API-Key", testserver.AlphaE2BKey))
	key := "Bearer " + testserver.AlphaKey
	file := make([]byte, 1024)
	rand.Read(file)
	echo, err := os.ReadFile(filepath.Join("testdata", "ws_echo.py"))
	if err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string][]byte{"www/f.bin": file, "ws_echo.py": echo} {
		if code, b := do(request("PUT", "/v1/sandboxes/"+id+"/files?path="+p, body, "Authorization", key,
			"Content-Type", "application/octet-stream")); code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("upload %s: %d %s", p, code, b)
		}
	}
	for _, cmd := range []string{`["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/www"]`,
		`["python3", "/workspace/ws_echo.py", "8765"]`} {
		if code, b := do(request("POST", "/v1/sandboxes/"+id+"/processes", []byte(`{"cmd": `+cmd+`}`), "Authorization", key)); code != http.StatusCreated {
			t.Fatalf("start %s: %d %s", cmd, code, b)
		}
	}
	route := "/v1/sandboxes/" + id + "/ports/"
	for _, port := range []string{"8000/", "8765/"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			// Until something listens (the WebSocket server's answer to
			// a plain GET is no HTTP: port_failed).
			_, b := do(request("GET", route+port, nil, "Authorization", key))
			if !bytes.Contains(b, []byte(`"port_closed"`)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("port %s never answered: %s", port, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	for _, c := range []struct {
		what string
		req  *http.Request
	}{
		{"header form", request("GET", "/f.bin", nil, "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8000", "E2B-Traffic-Access-Token", token)},
		{"host form", request("GET", "/f.bin", nil, "Host", "8000-"+id+".sb.test", "E2B-Traffic-Access-Token", token)},
		{"/v1 route", request("GET", route+"8000/f.bin", nil, "Authorization", key)},
	} {
		if code, b := do(c.req); code != http.StatusOK || !bytes.Equal(b, file) {
			t.Errorf("%s: %d, %d bytes (want the file's 1024)", c.what, code, len(b))
		}
	}
	for _, c := range []struct {
		what string
		req  *http.Request
	}{
		{"no token", request("GET", "/f.bin", nil, "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8000")},
		{"host form, no token", request("GET", "/f.bin", nil, "Host", "8000-"+id+".sb.test")},
	} {
		if code, b := do(c.req); code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", c.what, code, b)
		}
	}
	// A wrong token: the answer for a sandbox gone, which tells nobody
	// whether it exists.
	if code, b := do(request("GET", "/f.bin", nil, "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8000",
		"E2B-Traffic-Access-Token", "alpha."+strings.Repeat("0", 64))); code != http.StatusBadGateway || !bytes.Contains(b, []byte("not found")) {
		t.Errorf("a wrong token: %d %s, want 502 not found", code, b)
	}
	code, b = do(request("GET", route+"8001/", nil, "Authorization", key))
	var e struct {
		Error struct{ Code, Message string }
	}
	if code != http.StatusBadGateway || json.Unmarshal(b, &e) != nil || e.Error.Code != "port_closed" || !strings.Contains(e.Error.Message, "nothing listens on port 8001") {
		t.Errorf("a closed port through /v1: %d %s", code, b)
	}
	if code, b := do(request("GET", "/", nil, "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8001", "E2B-Traffic-Access-Token", token)); code != http.StatusBadGateway || !bytes.Contains(b, []byte("nothing listens on port 8001")) {
		t.Errorf("a closed port through the header form: %d %s", code, b)
	}

	logRoundTrips(t, s, id, token)

	wsRoundTrip(t, s.URL, "/", "E2b-Sandbox-Id: "+id+"\r\nE2b-Sandbox-Port: 8765\r\nE2B-Traffic-Access-Token: "+token+"\r\n")
	wsRoundTrip(t, s.URL, route+"8765/", "Authorization: "+key+"\r\n")

	cmd := exec.CommandContext(t.Context(), testenv.Corral(t), "sandbox", "url", id, "8000")
	cmd.Env = append(os.Environ(), s.Env()...)
	out, err := cmd.CombinedOutput()
	_, listenPort, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	want := s.URL + route + "8000/\nhttp://8000-" + id + ".sb.test:" + listenPort + "/\n"
	if err != nil || string(out) != want {
		t.Errorf("corral sandbox url: %v\n%s\nwant\n%s", err, out, want)
	}
}

// wsRoundTrip opens a WebSocket to path on the server at base with the
// extra header lines, and sends a text and a 100 KiB binary message,
// each of which must come back.
func wsRoundTrip(t *testing.T, base, path, header string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	k := make([]byte, 16)
	rand.Read(k)
	wsKey := base64.StdEncoding.EncodeToString(k)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: corral\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n%s\r\n", path, wsKey, header)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("websocket %s: %v", path, err)
	}
	sum := sha1.Sum([]byte(wsKey + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("websocket %s: %d %v %s", path, res.StatusCode, res.Header, b)
	}
	big := make([]byte, 100<<10)
	rand.Read(big)
	for _, m := range []struct {
		op   byte
		data []byte
	}{{1, []byte("hello through the tunnel")}, {2, big}} {
		if _, err := c.Write(wsFrame(m.op, m.data)); err != nil {
			t.Fatal(err)
		}
		op, data := readWSFrame(t, br)
		if op != m.op || !bytes.Equal(data, m.data) {
			t.Fatalf("websocket %s: op %d, %d bytes back; want op %d, %d bytes", path, op, len(data), m.op, len(m.data))
		}
	}
	c.Write(wsFrame(8, nil))
}

// wsFrame is a client's frame: final, masked.
func wsFrame(op byte, data []byte) []byte {
	f := []byte{0x80 | op}
	switch n := len(data); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	mask := make([]byte, 4)
	rand.Read(mask)
	f = append(f, mask...)
	for i, b := range data {
		f = append(f, b^mask[i%4])
	}
	return f
}

// readWSFrame reads a server's frame (unmasked).
func readWSFrame(t *testing.T, r *bufio.Reader) (byte, []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatalf("read a websocket frame: %v", err)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		io.ReadFull(r, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		io.ReadFull(r, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		t.Fatalf("read a websocket frame's %d bytes: %v", n, err)
	}
	return h[0] & 0x0F, data
}

// logRoundTrips logs the median of 50 GETs of the 1 KiB file through the
// header form from the host (one kept-alive connection), and of the same
// GETs made inside the sandbox (python's urllib, a connection each, as
// http.server closes them): the figure the bench row compares.
func logRoundTrips(t *testing.T, s *testserver.Server, id, token string) {
	t.Helper()
	var outside []time.Duration
	for range 50 {
		req, err := http.NewRequestWithContext(t.Context(), "GET", s.URL+"/f.bin", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "8000")
		req.Header.Set("E2B-Traffic-Access-Token", token)
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		outside = append(outside, time.Since(start))
	}
	slices.Sort(outside)
	script := `import time, urllib.request
ts = []
for _ in range(50):
    t0 = time.perf_counter()
    urllib.request.urlopen("http://127.0.0.1:8000/f.bin").read()
    ts.append(time.perf_counter() - t0)
ts.sort()
print(int(ts[25] * 1e6))`
	sb := sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: testserver.AlphaKey, Timeout: time.Minute}).Sandbox(id)
	stdout, stderr, exit, err := sb.Run(t.Context(), sandbox.StartProcessRequest{Cmd: []string{"python3", "-c", script}})
	if err != nil || exit == nil || exit.ExitCode != 0 {
		t.Fatalf("GETs inside the sandbox: %v %+v %s", err, exit, stderr)
	}
	inside, err := strconv.Atoi(strings.TrimSpace(string(stdout)))
	if err != nil {
		t.Fatalf("GETs inside the sandbox printed %q", stdout)
	}
	t.Logf("GET of 1 KiB, median of 50: %v through the header form from the host, %v inside the sandbox (%.1f×)",
		outside[25], time.Duration(inside)*time.Microsecond, float64(outside[25])/float64(time.Duration(inside)*time.Microsecond))
}
