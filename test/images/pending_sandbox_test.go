package images

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/test/testserver"
)

// An image being built (its build lock held, as `corral image build`
// holds it) is pending, not missing: creates and executions that need it
// answer 503 image_pending with Retry-After on /v1 and E2B's REST, and a
// warm pool class left out for it starts, without a restart, once the
// image is there (here: imported while the server runs).
func TestImagePendingThenPooled(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "tmp", "build-tiny.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s := testserver.Start(t, testserver.Options{
		Extra:  []string{"--image-dir", dir},
		Config: "\n[pool]\n[[pool.warm]]\nimage = \"tiny\"\ntier = \"container\"\nlanguage = \"bash\"\nmin_idle = 1\nmax_idle = 2\nzygote = false\n",
	})

	call := func(method, path, body string, header ...string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testserver.AlphaKey)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	pending := func(what string, status int, h http.Header, body string) {
		t.Helper()
		if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(body, `"tiny\" is still being built`) {
			t.Errorf("%s while tiny is being built: %d Retry-After %q %s; want 503 with Retry-After saying it is being built",
				what, status, h.Get("Retry-After"), body)
		}
	}
	st, h, body := call("POST", "/v1/sandboxes", `{"language":"bash","image":"tiny"}`)
	pending("POST /v1/sandboxes", st, h, body)
	if !strings.Contains(body, `"code":"image_pending"`) {
		t.Errorf("POST /v1/sandboxes: %s; want code image_pending", body)
	}
	st, h, body = call("POST", "/v1/executions?wait=true", `{"language":"bash","image":"tiny","code":"echo hi"}`)
	pending("POST /v1/executions", st, h, body)
	st, h, body = call("POST", "/sandboxes", `{"templateID":"tiny"}`, "X-API-Key", testserver.AlphaE2BKey)
	pending("E2B POST /sandboxes", st, h, body)

	// The build ends without an image: missing again, the caller's to fix.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if st, _, body = call("POST", "/v1/sandboxes", `{"language":"bash","image":"tiny"}`); st != http.StatusBadRequest {
		t.Errorf("POST /v1/sandboxes with no build and no image: %d %s; want 400", st, body)
	}

	// The image arrives while the server runs: its class starts and
	// serves.
	archive := writeArchive(t, dirImage(t, tinyRoot(t, "late-marker")), "corral.test/tiny:1")
	if out, errOut, code := corral(t, "image", "import", "--image-dir", dir, "--name", "tiny", archive); code != 0 {
		t.Fatalf("import: exit %d\n%s%s", code, errOut, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(metrics(t, s), `corral_pool_idle{image="tiny",tier="container"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("the tiny class did not start after its image arrived; metrics:\n%s", grep(metrics(t, s), "corral_pool"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, _, body = call("POST", "/v1/executions?wait=true", `{"language":"bash","image":"tiny","code":"cat /etc/marker"}`)
	var res struct{ Stdout, Status string }
	_ = json.Unmarshal([]byte(body), &res)
	if st != http.StatusOK || res.Stdout != "late-marker" {
		t.Fatalf("execution on the arrived image: %d %s", st, body)
	}
	if m := metrics(t, s); !strings.Contains(m, `corral_pool_claims_total{image="tiny",result="hit",tier="container"} 1`) {
		t.Errorf("the execution was not served by the tiny class:\n%s", grep(m, "corral_pool_claims_total"))
	}
}

func metrics(t *testing.T, s *testserver.Server) string {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, resp.Body)
	return b.String()
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
