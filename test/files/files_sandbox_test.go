// Package files tests what goes into and comes out of sandboxes through a
// real corral serve: input files by URL and inline, artifacts in the blob
// store behind signed links, hostile outputs, large artifacts in bounded
// memory, input attacks, and session workspaces.
package files

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const key = testserver.AlphaKey

func run(t *testing.T, s *testserver.Server, req sandbox.ExecuteRequest) sandbox.Result {
	t.Helper()
	return runAs(t, s, key, req)
}

func runAs(t *testing.T, s *testserver.Server, apiKey string, req sandbox.ExecuteRequest) sandbox.Result {
	t.Helper()
	var res sandbox.Result
	code, raw := s.Call(apiKey, "POST", "/v1/executions?wait=true", req, &res)
	if code != http.StatusOK {
		t.Fatalf("execute: %d %s", code, raw)
	}
	return res
}

// pngWriter is python that writes a valid PNG without any library.
const pngWriter = `
import struct, zlib
def png(path, w, h):
    raw = b''.join(b'\x00' + bytes((x * 7 % 256, y * 5 % 256, 128) * 1)[0:3] * 1 for y in range(h) for x in range(1)) 
    rows = b''.join(b'\x00' + b''.join(bytes(((x * 7) % 256, (y * 5) % 256, 128)) for x in range(w)) for y in range(h))
    def chunk(t, d):
        c = struct.pack('>I', len(d)) + t + d
        return c + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    data = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b'')
    open(path, 'wb').write(data)
`

func download(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestInputsAndArtifacts: a program reads a CSV given by URL (served by a
// local server the config allows) and writes a PNG and a CSV to
// /workspace/output; both come back as artifacts whose bytes match their
// sha256; a tampered and an expired link are refused.
func TestInputsAndArtifacts(t *testing.T) {
	for _, store := range []string{"local", "s3"} {
		t.Run(store, func(t *testing.T) {
			var extra []string
			if store == "s3" {
				extra = []string{"--blob", testenv.S3(t)}
			}
			testInputsAndArtifacts(t, extra)
		})
	}
}

func testInputsAndArtifacts(t *testing.T, extra []string) {
	s := testserver.Start(t, testserver.Options{Extra: extra, Config: `
[inputs]
allow_private = true
[files]
artifact_ttl = "4s"
`})
	data := "x,y\n1,2\n3,4\n"
	inputs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, data)
	}))
	defer inputs.Close()
	t0 := time.Now()
	defer func() { t.Logf("inputs/artifacts took %v", time.Since(t0)) }()
	res := run(t, s, sandbox.ExecuteRequest{Language: "python",
		Files: []sandbox.File{{Path: "data.csv", URL: inputs.URL + "/data.csv"}, {Path: "notes/readme.txt", ContentBase64: base64.StdEncoding.EncodeToString([]byte("inline"))}},
		Code: pngWriter + `
import csv, os
rows = list(csv.DictReader(open('/workspace/input/data.csv')))
total = sum(int(r['x']) + int(r['y']) for r in rows)
os.makedirs('/workspace/output', exist_ok=True)
open('/workspace/output/result.csv', 'w').write('total\n%d\n' % total)
png('/workspace/output/plot.png', 16, 8)
print(total, open('/workspace/input/notes/readme.txt').read())
`})
	if res.Status != sandbox.StatusSuccess || res.Stdout != "10 inline\n" {
		t.Fatalf("record %s %+v %q %s", res.Status, res.Error, res.Stdout, res.Stderr)
	}
	if len(res.Artifacts) != 2 {
		t.Fatalf("artifacts %+v", res.Artifacts)
	}
	t.Logf("executed after %v (duration %d ms, queue %d ms)", time.Since(t0), res.DurationMS, res.QueueMS)
	mimes := map[string]string{"plot.png": "image/png", "result.csv": "text/csv"}
	for _, a := range res.Artifacts {
		if !strings.HasPrefix(a.MIME, mimes[a.Path]) || a.URL == "" || a.ExpiresAt.IsZero() || a.Size == 0 {
			t.Errorf("artifact %+v", a)
		}
		code, b := download(t, a.URL)
		sum := sha256.Sum256(b)
		if code != 200 || hex.EncodeToString(sum[:]) != a.SHA256 || int64(len(b)) != a.Size {
			t.Errorf("%s: %d, %d bytes, sha256 %x, want %s", a.Path, code, len(b), sum, a.SHA256)
		}
		if a.Path == "plot.png" && !strings.HasPrefix(string(b), "\x89PNG\r\n\x1a\n") {
			t.Errorf("plot.png is not a PNG")
		}
		if a.Path == "result.csv" && string(b) != "total\n10\n" {
			t.Errorf("result.csv = %q", b)
		}
		// Tampered: another key, another expiry, another signature.
		for _, bad := range tamper(a.URL) {
			if code, _ := download(t, bad); code != http.StatusForbidden {
				t.Errorf("tampered link %s answered %d", bad, code)
			}
		}
	}
	// The record fetched later signs fresh links.
	var again sandbox.Result
	s.Call(key, "GET", "/v1/executions/"+res.ExecutionID, nil, &again)
	if len(again.Artifacts) != 2 || again.Artifacts[0].URL == "" {
		t.Errorf("GET record artifacts %+v", again.Artifacts)
	}
	time.Sleep(time.Until(res.Artifacts[0].ExpiresAt) + time.Second)
	if code, _ := download(t, res.Artifacts[0].URL); code != http.StatusForbidden {
		t.Errorf("expired link answered %d", code)
	}
}

// listed returns res, failing t unless it succeeded: a failed ls lists
// nothing, and would pass every "does not see" check.
func listed(t *testing.T, res sandbox.Result) sandbox.Result {
	t.Helper()
	if res.Status != sandbox.StatusSuccess {
		t.Fatalf("ls /workspace: %s %+v %s", res.Status, res.Error, res.Stderr)
	}
	return res
}

func tamper(u string) []string {
	var out []string
	if i := strings.Index(u, "sig="); i >= 0 {
		sig := []byte(u)
		c := sig[i+4]
		if c == 'a' {
			c = 'b'
		} else {
			c = 'a'
		}
		sig[i+4] = c
		out = append(out, string(sig))
	}
	if i := strings.Index(u, "expires="); i >= 0 {
		out = append(out, u[:i]+"expires=9999999999"+u[i+len("expires=")+10:])
	}
	for _, swap := range [][2]string{{"plot.png", "result.csv"}, {"result.csv", "plot.png"}} {
		if v := strings.Replace(u, swap[0], swap[1], 1); v != u {
			out = append(out, v)
		}
	}
	return out
}

// TestHostileOutputs: what a program leaves in /workspace/output can be
// neither a way to host data nor a way to hang the server.
func TestHostileOutputs(t *testing.T) {
	s := testserver.Start(t, testserver.Options{})
	for _, tier := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			start := time.Now()
			res := run(t, s, sandbox.ExecuteRequest{Language: "python", Isolation: tier, Limits: sandbox.Limits{TimeoutMS: 120000},
				Code: `
import os, subprocess
o = '/workspace/output'
# The flood sits deeper than the long path below, so that the breadth-
# first walk meets the long path before the file cap stops it.
os.makedirs(o + '/a/b/c/d/many', exist_ok=True)
open(o + '/good.txt', 'w').write('good')
os.symlink('/etc/shadow', o + '/shadow')
os.symlink('/', o + '/root')
os.symlink('/etc/passwd', o + '/flip')
os.link(o + '/good.txt', o + '/hard.txt')
os.mkfifo(o + '/fifo')
try:
    os.mknod(o + '/dev', 0o20666, os.makedev(1, 3))
except OSError as e:
    print('mknod', e.errno)
with open(o + '/sparse', 'wb') as f:
    f.truncate(1 << 40)
open(o.encode() + b'/new\nline', 'w').write('x')
open(o.encode() + b'/bad\xffname', 'w').write('x')
d = o + '/deep'
while len(d) < 4096 - 300:
    d += '/' + 'p' * 200
os.makedirs(d)
open(d + '/leaf.txt', 'w').write('leaf')
for i in range(100000):
    open('%s/a/b/c/d/many/%06d' % (o, i), 'w').close()
# A daemon flipping a link; the end of the program ends it.
subprocess.Popen(['bash', '-c', 'while :; do ln -sfn /etc ` + "`" + `/workspace/output/flip` + "`" + `; ln -sfn /workspace /workspace/output/flip; done'], start_new_session=True)
print('done')
`})
			took := time.Since(start)
			if res.Status != sandbox.StatusSuccess {
				t.Fatalf("%s %+v\n%s", res.Status, res.Error, res.Stderr)
			}
			if took > 90*time.Second {
				t.Errorf("took %v", took)
			}
			names := map[string]bool{}
			for _, a := range res.Artifacts {
				names[a.Path] = true
				if strings.HasPrefix(a.Path, "a/b/c/d/many/") {
					continue // empty files; a sample is downloaded below
				}
				code, b := download(t, a.URL)
				if code != 200 || strings.Contains(string(b), "root:") {
					t.Errorf("%s: %d %.80q", a.Path, code, b)
				}
			}
			for _, bad := range []string{"shadow", "root", "flip", "fifo", "dev", "sparse"} {
				if names[bad] {
					t.Errorf("collected %s", bad)
				}
			}
			if !names["good.txt"] || !names["hard.txt"] {
				t.Errorf("safe files not collected: %v", len(names))
			}
			if len(res.Artifacts) > 1000 {
				t.Errorf("%d artifacts; the cap is 1000", len(res.Artifacts))
			}
			reasons := map[string]int{}
			for _, sk := range res.ArtifactsSkipped {
				reasons[sk.Reason]++
			}
			wants := []string{"symbolic link (not followed)", "name is not printable UTF-8",
				"larger than 536870912 bytes", "more than 1000 files; the rest were not collected", "path longer than 768 bytes"}
			if tier == sandbox.IsolationContainer {
				// gVisor keeps FIFOs in its own kernel: none reaches the disk.
				wants = append(wants, "not a regular file")
			}
			for _, want := range wants {
				if reasons[want] == 0 {
					t.Errorf("no skip %q in %v", want, reasons)
				}
			}
			t.Logf("%s: %d artifacts, skipped %v, in %v", tier, len(res.Artifacts), reasons, took.Round(time.Millisecond))

			// /workspace/output itself a link to /etc.
			res = run(t, s, sandbox.ExecuteRequest{Language: "bash", Isolation: tier, Code: "ln -s /etc /workspace/output && echo linked"})
			if res.Status != sandbox.StatusSuccess || len(res.Artifacts) != 0 || len(res.ArtifactsSkipped) != 1 {
				t.Errorf("output as a link: %s artifacts %+v skipped %+v", res.Status, res.Artifacts, res.ArtifactsSkipped)
			}
		})
	}
}

// TestLargeArtifactBoundedMemory: a 256 MB artifact is stored while the
// server's peak RSS grows by less than 64 MB.
func TestLargeArtifactBoundedMemory(t *testing.T) {
	s := testserver.Start(t, testserver.Options{})
	run(t, s, sandbox.ExecuteRequest{Language: "bash", Code: "mkdir -p /workspace/output && echo warm > /workspace/output/w"})
	before := s.PeakRSS()
	res := run(t, s, sandbox.ExecuteRequest{Language: "bash", Limits: sandbox.Limits{DiskMB: 1024, TimeoutMS: 120000},
		Code: "mkdir -p /workspace/output && head -c 268435456 /dev/urandom > /workspace/output/big.bin && echo ok"})
	after := s.PeakRSS()
	if res.Status != sandbox.StatusSuccess || len(res.Artifacts) != 1 || res.Artifacts[0].Size != 256<<20 {
		t.Fatalf("%s %+v %+v", res.Status, res.Error, res.Artifacts)
	}
	resp, err := http.Get(res.Artifacts[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, _ := io.Copy(h, resp.Body)
	resp.Body.Close()
	if n != 256<<20 || hex.EncodeToString(h.Sum(nil)) != res.Artifacts[0].SHA256 {
		t.Errorf("downloaded %d bytes, sha256 mismatch", n)
	}
	growth := float64(after-before) / (1 << 20)
	t.Logf("server peak RSS %.1f MB before, %.1f MB after a 256 MB artifact (growth %.1f MB)", float64(before)/(1<<20), float64(after)/(1<<20), growth)
	if growth >= 64 {
		t.Errorf("peak RSS grew by %.1f MB", growth)
	}
}

// TestInputAttacks: bad paths, forbidden destinations, oversized and
// too-slow downloads are refused as input_error, naming the file, and
// nothing runs.
func TestInputAttacks(t *testing.T) {
	strict := testserver.Start(t, testserver.Options{})
	lax := testserver.Start(t, testserver.Options{Config: `
[inputs]
allow_private = true
max_file_mb = 1
fetch_timeout = "2s"
`})
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(make([]byte, 2<<20))
		case "/drip":
			f := w.(http.Flusher)
			for i := 0; i < 100; i++ {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				f.Flush()
				time.Sleep(100 * time.Millisecond)
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	defer src.Close()
	marker := "print('ran')"
	cases := []struct {
		name string
		s    *testserver.Server
		file sandbox.File
		in   string
	}{
		{"dotdot", strict, sandbox.File{Path: "../escape.txt", ContentBase64: "eA=="}, "../escape.txt"},
		{"absolute", strict, sandbox.File{Path: "/etc/passwd", ContentBase64: "eA=="}, "/etc/passwd"},
		{"nul", strict, sandbox.File{Path: "a\x00b", ContentBase64: "eA=="}, "input file"},
		{"loopback", strict, sandbox.File{Path: "l.txt", URL: src.URL + "/ok"}, "l.txt"},
		{"metadata", strict, sandbox.File{Path: "m.txt", URL: "http://169.254.169.254/latest/meta-data/"}, "m.txt"},
		{"scheme", strict, sandbox.File{Path: "f.txt", URL: "file:///etc/passwd"}, "f.txt"},
		{"toolarge", lax, sandbox.File{Path: "big.bin", URL: src.URL + "/big"}, "big.bin"},
		{"toolarge-inline", lax, sandbox.File{Path: "big64.bin", ContentBase64: base64.StdEncoding.EncodeToString(make([]byte, 2<<20))}, "big64.bin"},
		{"slowdrip", lax, sandbox.File{Path: "drip.txt", URL: src.URL + "/drip"}, "drip.txt"},
		{"badbase64", strict, sandbox.File{Path: "b.txt", ContentBase64: "!!!"}, "b.txt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, c.s, sandbox.ExecuteRequest{Language: "python", Code: marker, Files: []sandbox.File{c.file}})
			if res.Status != sandbox.StatusFailed || res.Error == nil || res.Error.Type != sandbox.ErrInput {
				t.Fatalf("%s %+v", res.Status, res.Error)
			}
			if !strings.Contains(res.Error.Message, c.in) {
				t.Errorf("message %q does not name %q", res.Error.Message, c.in)
			}
			if res.Stdout != "" || res.DurationMS != 0 {
				t.Errorf("the program ran: %q %d ms", res.Stdout, res.DurationMS)
			}
		})
	}
	// The same URL that the strict server refuses is fine where allowed.
	res := run(t, lax, sandbox.ExecuteRequest{Language: "bash", Code: "cat /workspace/input/ok.txt", Files: []sandbox.File{{Path: "ok.txt", URL: src.URL + "/ok"}}})
	if res.Stdout != "ok" {
		t.Errorf("allowed input: %s %+v %q", res.Status, res.Error, res.Stdout)
	}
}

// TestSessions: a file written in one execution is read by the next of
// the same session, is absent from another session, and is gone once the
// session is deleted or expires; session files can be listed, uploaded
// and downloaded; another tenant sees none of it.
func TestSessions(t *testing.T) {
	s := testserver.Start(t, testserver.Options{Config: `
[sessions]
reap_interval = "500ms"
`})
	sess := fmt.Sprintf("sess-%d", time.Now().UnixNano())
	w := run(t, s, sandbox.ExecuteRequest{SessionID: sess, Language: "python", Code: "open('/workspace/state.txt','w').write('turn 1'); open('/tmp/scratch','w').write('x')"})
	if w.Status != sandbox.StatusSuccess {
		t.Fatalf("%+v %s", w.Error, w.Stderr)
	}
	r := run(t, s, sandbox.ExecuteRequest{SessionID: sess, Language: "python", Code: "import os; print(open('/workspace/state.txt').read(), os.path.exists('/tmp/scratch'))"})
	if r.Stdout != "turn 1 False\n" {
		t.Errorf("second execution saw %q (%s)", r.Stdout, r.Stderr)
	}
	other := listed(t, run(t, s, sandbox.ExecuteRequest{SessionID: sess + "-other", Language: "bash", Code: "ls /workspace"}))
	if strings.Contains(other.Stdout, "state.txt") {
		t.Errorf("another session sees %q", other.Stdout)
	}
	// The files API.
	if code, raw := s.Call(key, "PUT", "/v1/sessions/"+sess+"/files/in/up.txt", "uploaded", nil); code != http.StatusNoContent {
		t.Fatalf("upload: %d %s", code, raw)
	}
	var listing struct {
		Entries []struct{ Name, Type string }
	}
	if code, raw := s.Call(key, "GET", "/v1/sessions/"+sess+"/files/", nil, &listing); code != 200 || len(listing.Entries) != 2 {
		t.Errorf("list: %d %s", code, raw)
	}
	if code, raw := s.Call(key, "GET", "/v1/sessions/"+sess+"/files/state.txt", nil, nil); code != 200 || string(raw) != "turn 1" {
		t.Errorf("download: %d %q", code, raw)
	}
	for _, bad := range []string{"../etc/passwd", "in/%2e%2e/x"} {
		if code, _ := s.Call(key, "GET", "/v1/sessions/"+sess+"/files/"+bad, nil, nil); code != 400 && code != 404 {
			t.Errorf("GET files/%s: %d", bad, code)
		}
	}
	if code, _ := s.Call(key, "GET", "/v1/sessions/"+sess+"/files/nope.txt", nil, nil); code != 404 {
		t.Errorf("missing file: %d", code)
	}
	up := run(t, s, sandbox.ExecuteRequest{SessionID: sess, Language: "bash", Code: "cat /workspace/in/up.txt"})
	if up.Stdout != "uploaded" {
		t.Errorf("uploaded file read as %q", up.Stdout)
	}
	// Another tenant sees nothing.
	for _, p := range []string{"/v1/sessions/" + sess, "/v1/sessions/" + sess + "/files/state.txt"} {
		if code, _ := s.Call(testserver.BetaKey, "GET", p, nil, nil); code != 404 {
			t.Errorf("beta GET %s: %d", p, code)
		}
	}
	beta := listed(t, runAs(t, s, testserver.BetaKey, sandbox.ExecuteRequest{SessionID: sess, Language: "bash", Code: "ls /workspace"}))
	if strings.Contains(beta.Stdout, "state.txt") {
		t.Errorf("beta's session of the same name sees %q", beta.Stdout)
	}
	// Deleted: gone.
	if code, raw := s.Call(key, "DELETE", "/v1/sessions/"+sess, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, raw)
	}
	if code, _ := s.Call(key, "GET", "/v1/sessions/"+sess, nil, nil); code != 404 {
		t.Errorf("deleted session: %d", code)
	}
	gone := listed(t, run(t, s, sandbox.ExecuteRequest{SessionID: sess, Language: "bash", Code: "ls /workspace"}))
	if strings.Contains(gone.Stdout, "state.txt") {
		t.Errorf("after delete the workspace holds %q", gone.Stdout)
	}
	// Expired: gone.
	short := sess + "-short"
	if code, raw := s.Call(key, "PUT", "/v1/sessions/"+short, `{"ttl_seconds":1}`, nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, raw)
	}
	if res := run(t, s, sandbox.ExecuteRequest{SessionID: short, Language: "bash", Code: "echo hi > /workspace/f"}); res.Status != sandbox.StatusSuccess {
		t.Fatalf("write in the short session: %s %+v", res.Status, res.Error)
	}
	// The reaper (every 500ms here) removes an expired session's
	// directory last; until it has, an execution could still find the
	// session's disk.
	dir := filepath.Join(s.Data, "sessions", "alpha", short)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the session's directory: %v", err)
	}
	if !testenv.Eventually(t, 30*time.Second, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, fs.ErrNotExist)
	}) {
		t.Fatalf("the expired session's directory %s is still there after 30s", dir)
	}
	if code, _ := s.Call(key, "GET", "/v1/sessions/"+short, nil, nil); code != 404 {
		t.Errorf("expired session: %d", code)
	}
	after := listed(t, run(t, s, sandbox.ExecuteRequest{SessionID: short, Language: "bash", Code: "ls /workspace"}))
	if strings.Contains(after.Stdout, "f") {
		t.Errorf("after expiry the workspace holds %q", after.Stdout)
	}
}
