// Package images tests Corral's images end to end with the real binary and
// real sandboxes: the python image built from its recipe (once per machine,
// then reused), programs on it on both tiers, archives imported and
// refused, eviction around a running sandbox, and verdicts for missing
// modules.
package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var tiers = []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor}

// corral runs the real binary.
func corral(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testenv.Corral(t), args...)
	cmd.Env = append(os.Environ(), "CORRAL_DATA_DIR="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run corral %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

var (
	pythonOnce sync.Once
	pythonErr  string
)

// buildPython builds the python image into the machine's test image
// directory through the CLI: minutes the first time on a machine, a no-op
// after.
func buildPython(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	pythonOnce.Do(func() {
		start := time.Now()
		out, errOut, code := corral(t, "image", "build", "--image-dir", testenv.ImageDir(), "python")
		t.Logf("corral image build python (%s):\n%s%s", time.Since(start).Round(time.Millisecond), lastLines(errOut, 5), out)
		if code != 0 {
			pythonErr = fmt.Sprintf("corral image build python: exit %d\n%s%s", code, errOut, out)
		}
	})
	if pythonErr != "" {
		t.Fatal(pythonErr)
	}
}

func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

func run(t *testing.T, e *engine.Engine, req sandbox.ExecuteRequest) sandbox.Result {
	t.Helper()
	if req.Limits.TimeoutMS == 0 {
		req.Limits.TimeoutMS = 60_000
	}
	job, err := e.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	return e.Run(t.Context(), job, nil)
}

func wantSuccess(t *testing.T, res sandbox.Result) {
	t.Helper()
	if res.Status != sandbox.StatusSuccess {
		t.Fatalf("status %s, error %+v\nstdout:\n%s\nstderr:\n%s", res.Status, res.Error, res.Stdout, res.Stderr)
	}
}

const plot = `
import os, pwd
import numpy, pandas, matplotlib, scipy.linalg
import matplotlib.pyplot as plt
df = pandas.DataFrame({'x': numpy.arange(10), 'y': numpy.arange(10) ** 2})
fig, ax = plt.subplots()
ax.plot(df.x, df.y)
os.makedirs('/workspace/output', exist_ok=True)
fig.savefig('/workspace/output/plot.png')
with open('/workspace/output/plot.png', 'rb') as f:
    png = f.read(8) == b'\x89PNG\r\n\x1a\n'
print('plot', png, os.path.getsize('/workspace/output/plot.png'))
print('user', pwd.getpwuid(os.getuid()).pw_name, os.getuid())
print('det', round(scipy.linalg.det(numpy.eye(3) * 2)))
`

func TestPythonImage(t *testing.T) {
	buildPython(t)
	// A second build is a no-op: the recipe has not changed.
	start := time.Now()
	out, errOut, code := corral(t, "image", "build", "--image-dir", testenv.ImageDir(), "python")
	if code != 0 || !strings.Contains(out, "python: up to date") {
		t.Fatalf("second build: exit %d\n%s%s", code, errOut, out)
	}
	t.Logf("cached build: %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))

	out, errOut, code = corral(t, "image", "ls", "--image-dir", testenv.ImageDir(), "--json")
	if code != 0 {
		t.Fatalf("image ls: exit %d: %s", code, errOut)
	}
	var list []images.Info
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("image ls --json: %v\n%s", err, out)
	}
	i := slices.IndexFunc(list, func(i images.Info) bool { return i.Name == "python" })
	if i < 0 || list[i].Size < 100<<20 || !strings.HasPrefix(list[i].Digest, "sha256:") {
		t.Fatalf("image ls: %s", out)
	}
	py := list[i]
	t.Logf("python image: %s, %s", py.Digest, images.FormatSize(py.Size))

	e := testenv.ImageEngine(t, testenv.ImageStore(t))
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			res := run(t, e, sandbox.ExecuteRequest{Language: "python", Image: "python", Isolation: tier, Code: plot,
				Limits: sandbox.Limits{MemoryMB: 1024}})
			wantSuccess(t, res)
			if m := regexp.MustCompile(`plot True (\d+)`).FindStringSubmatch(res.Stdout); m == nil || m[1] == "0" {
				t.Errorf("no PNG written:\n%s", res.Stdout)
			}
			for _, want := range []string{"user sandbox 1000", "det 8"} {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, res.Stdout)
				}
			}
			if res.Image != "python" || res.ImageDigest != py.Digest {
				t.Errorf("record says image %s %s, want python %s", res.Image, res.ImageDigest, py.Digest)
			}
		})
	}
}

// strict checks the image from inside: nothing writable, no privilege
// bits, nothing owned by the sandbox user.
const strict = `
import os, stat, errno
bad = []
for top in ['/usr', '/etc', '/var', '/opt', '/root', '/home', '/srv']:
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                continue
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID) or st.st_mode & stat.S_IWOTH or st.st_uid == 1000 or st.st_gid == 1000:
                bad.append('%s %o %d' % (p, st.st_mode, st.st_uid))
print('bad', len(bad), bad[:5])
for p in ['/x', '/etc/passwd', '/usr/lib/python3/dist-packages/x.py', '/usr/bin/python3', '/.corral/agent']:
    try:
        open(p, 'a').close()
        print('wrote', p)
    except OSError as e:
        print('refused', p, errno.errorcode[e.errno])
`

func TestPythonImageIsReadOnly(t *testing.T) {
	buildPython(t)
	e := testenv.ImageEngine(t, testenv.ImageStore(t))
	res := run(t, e, sandbox.ExecuteRequest{Language: "python", Image: "python", Code: strict})
	wantSuccess(t, res)
	if !strings.Contains(res.Stdout, "bad 0 []") || strings.Contains(res.Stdout, "wrote") {
		t.Errorf("the image is not read-only to the sandbox user:\n%s", res.Stdout)
	}
}

func TestMissingModule(t *testing.T) {
	buildPython(t)
	e := testenv.ImageEngine(t, testenv.ImageStore(t))
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			res := run(t, e, sandbox.ExecuteRequest{Language: "python", Image: "python", Isolation: tier, Code: "import nonexistent_mod\n"})
			if res.Error == nil || res.Error.Type != sandbox.ErrRuntime {
				t.Fatalf("error %+v, want runtime_error", res.Error)
			}
			for _, want := range []string{"No module named 'nonexistent_mod'", `"nonexistent_mod" is not in image "python", nor in any other image`} {
				if !strings.Contains(res.Error.Message, want) {
					t.Errorf("message %q lacks %q", res.Error.Message, want)
				}
			}
		})
	}
	// A module the python image has and the host's python lacks: the
	// message points at the image that has it.
	missing := ""
	for _, m := range []string{"numpy", "pandas", "matplotlib", "scipy"} {
		if exec.Command("/usr/bin/python3", "-c", "import "+m).Run() != nil {
			missing = m
			break
		}
	}
	testenv.Need(t, missing != "", "a host python without one of numpy, pandas, matplotlib and scipy")
	res := run(t, e, sandbox.ExecuteRequest{Language: "python", Image: "host", Code: "import " + missing + "\n"})
	if res.Error == nil || res.Error.Type != sandbox.ErrRuntime || !strings.Contains(res.Error.Message, "images that have it: ") ||
		!strings.Contains(res.Error.Message, "python") {
		t.Errorf("import %s on the host image: error %+v, want a runtime_error naming the python image", missing, res.Error)
	}
}

func TestDefaultImages(t *testing.T) {
	buildPython(t)
	store := images.New(images.Config{Dir: testenv.ImageDir(), UID: 1000, GID: 1000, Defaults: map[string]string{"python": "python"}})
	e := testenv.ImageEngine(t, store)
	res := run(t, e, sandbox.ExecuteRequest{Language: "python", Code: "import pandas; print(pandas.__name__)\n"})
	wantSuccess(t, res)
	if res.Image != "python" {
		t.Errorf("ran on %s, want the python default", res.Image)
	}
	res = run(t, e, sandbox.ExecuteRequest{Language: "bash", Code: "echo hi\n"})
	wantSuccess(t, res)
	if res.Image != images.HostName {
		t.Errorf("bash ran on %s, want host", res.Image)
	}

	// A default that is not built is a 400 naming it, not a fallback.
	missing := testenv.ImageEngine(t, images.New(images.Config{Dir: testenv.ImageDir(), Defaults: map[string]string{"python": "no-such-image"}}))
	_, err := missing.Prepare(sandbox.ExecuteRequest{Language: "python", Code: "print(1)\n"})
	var ie *validate.InputError
	if !errors.As(err, &ie) || ie.Field != "image" || !strings.Contains(ie.Message, "no-such-image") {
		t.Errorf("Prepare = %v, want an input error on image naming it", err)
	}
	_, err = e.Prepare(sandbox.ExecuteRequest{Language: "python", Image: "nope", Code: "print(1)\n"})
	if !errors.As(err, &ie) || ie.Field != "image" || !strings.Contains(ie.Message, `"nope"`) {
		t.Errorf("Prepare = %v, want an input error on image naming it", err)
	}
}

// tinyRoot copies host programs and the libraries they load into a
// directory: a root filesystem of a few MB where bash runs.
func tinyRoot(t *testing.T, marker string) string {
	t.Helper()
	dir := t.TempDir()
	put := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(src)
		p := filepath.Join(dir, dst)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	for _, prog := range []string{"bash", "sleep", "cat"} {
		bin, err := exec.LookPath(prog)
		if err != nil {
			t.Fatal(err)
		}
		put(bin, "usr/bin/"+prog)
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", bin, err)
		}
		for _, m := range regexp.MustCompile(`(/\S+) \(0x`).FindAllStringSubmatch(string(out), -1) {
			put(m[1], strings.TrimPrefix(m[1], "/"))
		}
	}
	os.Symlink("usr/bin", filepath.Join(dir, "bin"))
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "marker"), []byte(marker), 0o644)
	return dir
}

// dirImage makes an image of dir with go-containerregistry, one layer.
func dirImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(dir, p)
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return layersImage(t, buf.Bytes())
}

func layersImage(t *testing.T, layers ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

func writeArchive(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.tar")
	ref, err := name.ParseReference(tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImportedImage(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	archive := writeArchive(t, dirImage(t, tinyRoot(t, "tiny-marker")), "corral.test/tiny:1")
	out, errOut, code := corral(t, "image", "import", "--image-dir", dir, "--name", "tiny", archive)
	if code != 0 {
		t.Fatalf("import: exit %d\n%s%s", code, errOut, out)
	}
	t.Log(strings.TrimSpace(out))
	e := testenv.ImageEngine(t, images.New(images.Config{Dir: dir, UID: 1000, GID: 1000}))
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			res := run(t, e, sandbox.ExecuteRequest{Language: "bash", Image: "tiny", Isolation: tier,
				Code: "echo \"hello from $(cat /etc/marker) as $UID\"\n"})
			wantSuccess(t, res)
			if strings.TrimSpace(res.Stdout) != "hello from tiny-marker as 1000" {
				t.Errorf("stdout %q", res.Stdout)
			}
		})
	}

	// Archives with entries escaping the root are refused whole.
	for _, tc := range []struct {
		name  string
		entry tar.Header
	}{
		{"dotdot", tar.Header{Name: "../../../../tmp/corral-import-escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		{"absolute", tar.Header{Name: "/tmp/corral-import-escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		{"symlink", tar.Header{Name: "usr/escape", Typeflag: tar.TypeSymlink, Linkname: "../../../../../tmp", Mode: 0o777}},
		{"hardlink", tar.Header{Name: "usr/escape", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd", Mode: 0o644}},
	} {
		t.Run("refuse "+tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			tw.WriteHeader(&tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755})
			tw.WriteHeader(&tc.entry)
			tw.Close()
			evil := writeArchive(t, layersImage(t, buf.Bytes()), "corral.test/evil:1")
			out, errOut, code := corral(t, "image", "import", "--image-dir", dir, "--name", "evil", evil)
			if code != 1 || !strings.Contains(errOut, "unsafe archive") {
				t.Fatalf("import: exit %d, want 1 with \"unsafe archive\"\n%s%s", code, errOut, out)
			}
			if _, err := os.Lstat("/tmp/corral-import-escape"); err == nil {
				t.Fatal("the archive wrote outside its root")
			}
		})
	}
	out, _, _ = corral(t, "image", "ls", "--image-dir", dir)
	if strings.Contains(out, "evil") || !strings.Contains(out, "tiny") {
		t.Errorf("image ls after refusals:\n%s", out)
	}
}

// A build or import that needs room evicts the least recently used image
// not in use: an image a sandbox is running on stays, even when it is the
// least recently used.
func TestEvictionSparesRunningSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	root := tinyRoot(t, "a")
	importAs := func(s *images.Store, name string) images.Info {
		t.Helper()
		os.WriteFile(filepath.Join(root, "etc", "marker"), []byte(name), 0o644)
		info, err := s.Import(t.Context(), writeArchive(t, dirImage(t, root), "corral.test/"+name+":1"), images.ImportOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	a := importAs(images.New(images.Config{Dir: dir, UID: 1000, GID: 1000}), "a")
	s := images.New(images.Config{Dir: dir, UID: 1000, GID: 1000, Budget: a.Size*5/2 + 1})
	importAs(s, "b")
	e := testenv.ImageEngine(t, s)

	done := make(chan sandbox.Result, 1)
	go func() {
		job, err := e.Prepare(sandbox.ExecuteRequest{Language: "bash", Image: "a", Code: "sleep 3; echo \"still $(cat /etc/marker)\"\n"})
		if err != nil {
			done <- sandbox.Result{Stderr: err.Error()}
			return
		}
		done <- e.Run(t.Context(), job, nil)
	}()
	inUse := func() bool {
		list, _ := s.List()
		return slices.ContainsFunc(list, func(i images.Info) bool { return i.Name == "a" && i.InUse })
	}
	for deadline := time.Now().Add(30 * time.Second); !inUse(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the running sandbox's image is not in use")
		}
	}
	// b is used after a: a is the least recently used, and in use.
	img, _ := s.Resolve("b")
	release, err := s.Lock(img)
	if err != nil {
		t.Fatal(err)
	}
	release()
	c := importAs(s, "c")
	if !slices.Equal(c.Evicted, []string{"b"}) {
		t.Errorf("evicted %v, want [b]", c.Evicted)
	}
	res := <-done
	wantSuccess(t, res)
	if strings.TrimSpace(res.Stdout) != "still a" {
		t.Errorf("stdout %q", res.Stdout)
	}
	list, _ := s.List()
	var got []string
	for _, i := range list {
		got = append(got, i.Name)
	}
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("images %v, want [a c]", got)
	}
}

// An execution prepared on an image that is replaced before it runs runs
// on the replacement (and says so); one whose image was removed fails
// without touching the removed files.
func TestImageChangedBeforeRun(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	root := tinyRoot(t, "v1")
	s := images.New(images.Config{Dir: dir, UID: 1000, GID: 1000})
	importRoot := func() images.Info {
		t.Helper()
		info, err := s.Import(t.Context(), writeArchive(t, dirImage(t, root), "corral.test/tiny:1"), images.ImportOptions{Name: "tiny"})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	v1 := importRoot()
	e := testenv.ImageEngine(t, s)
	job, err := e.Prepare(sandbox.ExecuteRequest{Language: "bash", Image: "tiny", Code: "cat /etc/marker\n"})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc", "marker"), []byte("v2"), 0o644)
	v2 := importRoot()
	if _, err := os.Stat(v1.Rootfs); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the replaced version is still there: %v", err)
	}
	res := e.Run(t.Context(), job, nil)
	wantSuccess(t, res)
	if res.Stdout != "v2" || res.ImageDigest != v2.Digest {
		t.Errorf("ran %q on %s, want v2 on %s", res.Stdout, res.ImageDigest, v2.Digest)
	}

	job, err = e.Prepare(sandbox.ExecuteRequest{Language: "bash", Image: "tiny", Code: "cat /etc/marker\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove("tiny"); err != nil {
		t.Fatal(err)
	}
	res = e.Run(t.Context(), job, nil)
	if res.Error == nil || res.Error.Type != sandbox.ErrInternal || !res.Error.Retryable || !strings.Contains(res.Error.Message, "removed") {
		t.Errorf("error %+v, want a retryable internal error saying the image was removed", res.Error)
	}
}

// TestOtherRecipes builds the node, go and bash images (and with
// CORRAL_TEST_ALL_IMAGES=1, full) and runs a program on each. A machine
// that has not built them needs minutes per image, so the test runs in CI
// (where the machine keeps its image directory between runs) or when
// CORRAL_TEST_ALL_IMAGES=1, and is skipped otherwise.
func TestOtherRecipes(t *testing.T) {
	testenv.RequireRoot(t)
	all := os.Getenv("CORRAL_TEST_ALL_IMAGES") == "1"
	if os.Getenv("CI") == "" && !all {
		t.Skip("builds three more images; set CORRAL_TEST_ALL_IMAGES=1 (CI runs it)")
	}
	cases := []struct {
		image, lang, code, want string
	}{
		{"bash", "bash", "echo '{\"a\": 41}' | jq '.a + 1'; sqlite3 :memory: 'select 6 * 7'; curl --version | head -c 4; echo",
			"42\n42\ncurl\n"},
		{"go", "go", "package main\n\nimport (\n\t\"fmt\"\n\t\"slices\"\n)\n\nfunc main() { fmt.Println(slices.Max([]int{3, 42, 7})) }\n",
			"42\n"},
		{"node", "javascript", "const _ = require('lodash'), axios = require('axios'), dayjs = require('dayjs');\n" +
			"console.log(_.sum([40, 2]), typeof axios.get, dayjs('2024-01-02').year());\n", "42 function 2024\n"},
	}
	if all {
		cases = append(cases, struct{ image, lang, code, want string }{"full", "python",
			"import numpy, subprocess\nprint(int(numpy.int64(42)))\nprint(subprocess.run(['node', '-e', 'console.log(require(\"lodash\").sum([40, 2]))'], capture_output=True, text=True).stdout, end='')\n",
			"42\n42\n"})
	}
	store := testenv.ImageStore(t)
	e := testenv.ImageEngine(t, store)
	for _, tc := range cases {
		t.Run(tc.image, func(t *testing.T) {
			start := time.Now()
			out, errOut, code := corral(t, "image", "build", "--image-dir", testenv.ImageDir(), tc.image)
			if code != 0 {
				t.Fatalf("build %s: exit %d\n%s%s", tc.image, code, lastLines(errOut, 20), out)
			}
			t.Logf("%s (%s)", strings.TrimSpace(out), time.Since(start).Round(time.Millisecond))
			for _, tier := range tiers {
				res := run(t, e, sandbox.ExecuteRequest{Language: tc.lang, Image: tc.image, Isolation: tier, Code: tc.code,
					Limits: sandbox.Limits{MemoryMB: 1024}})
				wantSuccess(t, res)
				if res.Stdout != tc.want {
					t.Errorf("%s: stdout %q, want %q", tier, res.Stdout, tc.want)
				}
			}
		})
	}
	// A missing npm package names the images that have it.
	res := run(t, e, sandbox.ExecuteRequest{Language: "javascript", Image: "host", Code: "require('lodash')\n"})
	if res.Error == nil || !strings.Contains(res.Error.Message, "Cannot find module 'lodash'") ||
		!strings.Contains(res.Error.Message, "images that have it: ") || !strings.Contains(res.Error.Message, "node") {
		t.Errorf("error %+v, want one naming the node image", res.Error)
	}
}
