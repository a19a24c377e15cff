package images

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BuildOptions control a build.
type BuildOptions struct {
	// Force rebuilds an image that is up to date.
	Force bool
	// Output, if set, also receives the build log as it is written.
	Output io.Writer
	// Progress is told what the build is doing and how far along it is,
	// from 0 to 1. It is called from one goroutine at a time.
	Progress func(stage string, fraction float64)
	// Mmdebstrap and Npm are the programs to run; empty looks them up in
	// PATH.
	Mmdebstrap, Npm string
	// CacheDir keeps downloaded .deb files and npm's cache between builds
	// (outside the store: they are not images); empty keeps none.
	CacheDir string
}

// Build builds the image r describes with mmdebstrap and installs it under
// r's name. When the installed image came from the same recipe (Recipe.Hash)
// it does nothing and returns the image with Cached set, unless
// opts.Force. The build's log is written to LogPath(r.Name). Build needs
// root.
func (s *Store) Build(ctx context.Context, r Recipe, opts BuildOptions) (Info, error) {
	if err := CheckName(r.Name); err != nil {
		return Info{}, err
	}
	if err := r.check(); err != nil {
		return Info{}, err
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string, float64) {}
	}
	hash := r.Hash(s.cfg.UID, s.cfg.GID)
	unlock, err := s.buildLock(ctx, r.Name)
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	if rec, err := s.record(r.Name); err == nil && rec.RecipeHash == hash && !opts.Force {
		if _, err := readMeta(s.versionDir(rec.Version)); err == nil {
			info := s.info(rec)
			info.Cached = true
			return info, nil
		}
	}
	mmdebstrap, err := lookPath(opts.Mmdebstrap, "mmdebstrap")
	if err != nil {
		return Info{}, err
	}
	var npm string
	if len(r.Npm) > 0 {
		if npm, err = lookPath(opts.Npm, "npm"); err != nil {
			return Info{}, err
		}
	}
	if err := s.makeDirs(); err != nil {
		return Info{}, err
	}
	logf, err := os.Create(s.LogPath(r.Name))
	if err != nil {
		return Info{}, fmt.Errorf("create build log: %w", err)
	}
	defer logf.Close()
	var log io.Writer = logf
	if opts.Output != nil {
		log = io.MultiWriter(logf, opts.Output)
	}
	start := time.Now()
	fmt.Fprintf(log, "corral image build %s at %s\nrecipe hash %s\npackages: %s\npurge: %s\nnpm: %s\nenv: %s\n\n",
		r.Name, start.UTC().Format(time.RFC3339), hash, strings.Join(r.Packages, " "), strings.Join(r.Purge, " "),
		strings.Join(r.Npm, " "), strings.Join(r.EnvList(), " "))

	st, err := s.newStage()
	if err != nil {
		return Info{}, err
	}
	defer st.discard()
	rootfs := filepath.Join(st.dir, "rootfs")
	progress("starting mmdebstrap", 0.01)
	if err := runMmdebstrap(ctx, mmdebstrap, r, rootfs, opts.CacheDir, log, progress); err != nil {
		fmt.Fprintf(log, "\nbuild failed: %v\n", err)
		return Info{}, fmt.Errorf("build %s: %w (log: %s)", r.Name, err, s.LogPath(r.Name))
	}
	if len(r.Npm) > 0 {
		progress("installing npm packages", 0.86)
		if err := vendorNpm(ctx, npm, r.Npm, st.dir, opts.CacheDir, log); err != nil {
			fmt.Fprintf(log, "\nbuild failed: %v\n", err)
			return Info{}, fmt.Errorf("build %s: %w (log: %s)", r.Name, err, s.LogPath(r.Name))
		}
	}
	if err := writePackageList(rootfs, filepath.Join(st.dir, "packages.txt")); err != nil {
		return Info{}, err
	}
	m, err := s.finish(st, r.EnvList(), progress)
	if err != nil {
		fmt.Fprintf(log, "\nbuild failed: %v\n", err)
		return Info{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	progress("installing the image", 0.98)
	info, err := s.install(st, m, record{Name: r.Name, Source: "recipe", RecipeHash: hash, Origin: "images/" + r.Name + ".toml"})
	if err != nil {
		fmt.Fprintf(log, "\nbuild failed: %v\n", err)
		return info, fmt.Errorf("build %s: %w", r.Name, err)
	}
	fmt.Fprintf(log, "\nbuilt %s: %s, %s, in %s\n", r.Name, m.Digest, FormatSize(m.Size), time.Since(start).Round(time.Second))
	progress("done", 1)
	return info, nil
}

// Bootstrap is the Debian part of a build alone: mmdebstrap for r into
// rootfs (new or empty), with r's purges, and nothing of the store or of
// Corral's sandbox layout. It builds Corral's own container image
// (deploy/image), which is not a sandbox image. Its log goes to log.
// Bootstrap needs root.
func Bootstrap(ctx context.Context, r Recipe, rootfs string, opts BuildOptions, log io.Writer) error {
	if err := r.check(); err != nil {
		return err
	}
	mmdebstrap, err := lookPath(opts.Mmdebstrap, "mmdebstrap")
	if err != nil {
		return err
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string, float64) {}
	}
	return runMmdebstrap(ctx, mmdebstrap, r, rootfs, opts.CacheDir, log, progress)
}

func lookPath(explicit, name string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (scripts/deps.sh installs it): %w", name, err)
	}
	return p, nil
}

// mmdebstrapArgs builds the command line: root mode (a real chroot, so
// maintainer scripts run as on a Debian machine), a directory as output,
// and, with a cache directory, downloaded packages kept between builds.
func mmdebstrapArgs(r Recipe, rootfs, cacheDir string) []string {
	args := []string{
		"--mode=root", "--variant=" + r.Variant, "--format=directory", "--verbose",
		"--include=" + strings.Join(r.Packages, ","),
		`--aptopt=Acquire::Retries "3"`,
	}
	if cacheDir != "" {
		debs := filepath.Join(cacheDir, "debs", r.Suite)
		args = append(args,
			"--skip=essential/unlink",
			`--setup-hook=mkdir -p "$1"/var/cache/apt/archives/`,
			"--setup-hook=sync-in "+debs+" /var/cache/apt/archives/",
			"--customize-hook=sync-out /var/cache/apt/archives "+debs,
		)
	}
	if len(r.Purge) > 0 {
		args = append(args, `--customize-hook=chroot "$1" dpkg --purge --force-depends `+strings.Join(r.Purge, " "))
	}
	args = append(args, r.Suite, rootfs, "deb "+r.Mirror+" "+r.Suite+" main")
	return append(args, r.Sources...)
}

func runMmdebstrap(ctx context.Context, bin string, r Recipe, rootfs, cacheDir string, log io.Writer, progress func(string, float64)) error {
	if cacheDir != "" {
		if err := os.MkdirAll(filepath.Join(cacheDir, "debs", r.Suite), 0o755); err != nil {
			return fmt.Errorf("create package cache: %w", err)
		}
	}
	args := mmdebstrapArgs(r, rootfs, cacheDir)
	fmt.Fprintf(log, "$ %s %s\n", bin, shellQuote(args))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(r.SourceDateEpoch, 10),
		"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// mmdebstrap unmounts what it mounted in the chroot when it is
	// terminated; a kill would leave the mounts.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mmdebstrap: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var p mmProgress
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(log, line)
			if stage, frac, ok := p.line(line); ok {
				progress(stage, frac)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mmdebstrap: %w", err)
	}
	return nil
}

func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \"'$\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// mmProgress turns mmdebstrap's verbose output into a fraction of the
// build: its stages, and within package installation apt's and dpkg's
// per-package lines against the number of packages apt announced.
type mmProgress struct {
	stage                string
	base, span           float64
	total                int
	gets, unpacks, setup int
	last                 float64
}

var (
	newlyInstalled = regexp.MustCompile(`(\d+) newly installed`)
	mmStages       = []struct {
		prefix, stage string
		base, span    float64
	}{
		{"I: running apt-get update", "updating package lists", 0.02, 0.03},
		{"I: downloading packages", "downloading essential packages", 0.05, 0.15},
		{"I: extracting archives", "extracting essential packages", 0.20, 0.05},
		{"I: installing essential packages", "installing essential packages", 0.25, 0.10},
		{"I: installing remaining packages", "installing packages", 0.35, 0.45},
		{"I: cleaning package lists", "cleaning up", 0.82, 0.02},
		{"I: success", "mmdebstrap done", 0.85, 0},
	}
)

func (p *mmProgress) line(l string) (string, float64, bool) {
	for _, s := range mmStages {
		if strings.HasPrefix(l, s.prefix) {
			p.stage, p.base, p.span = s.stage, s.base, s.span
			p.total, p.gets, p.unpacks, p.setup = 0, 0, 0, 0
			p.last = s.base
			return s.stage, s.base, true
		}
	}
	switch {
	case p.stage == "":
		return "", 0, false
	case strings.HasPrefix(l, "Get:"):
		p.gets++
	case strings.HasPrefix(l, "Unpacking "):
		p.unpacks++
	case strings.HasPrefix(l, "Setting up "):
		p.setup++
	default:
		if m := newlyInstalled.FindStringSubmatch(l); m != nil {
			p.total, _ = strconv.Atoi(m[1])
		}
		return "", 0, false
	}
	if p.total == 0 {
		return "", 0, false
	}
	// Downloads, unpacking and configuration take about a third each.
	n := float64(p.total)
	done := (min(float64(p.gets), n) + min(float64(p.unpacks), n) + min(float64(p.setup), n)) / (3 * n)
	frac := p.base + p.span*done
	if frac-p.last < 0.005 {
		return "", 0, false
	}
	p.last = frac
	var detail string
	switch {
	case p.setup > 0:
		detail = fmt.Sprintf("configuring packages (%d/%d)", min(p.setup, p.total), p.total)
	case p.unpacks > 0:
		detail = fmt.Sprintf("unpacking packages (%d/%d)", min(p.unpacks, p.total), p.total)
	default:
		detail = fmt.Sprintf("downloading packages (%d/%d)", min(p.gets, p.total), p.total)
	}
	return detail, frac, true
}

// vendorNpm installs npm packages with the host's npm into a directory
// beside the rootfs (install scripts off: no package code runs on the host)
// and moves them to /usr/local/lib/node_modules, with /node_modules linking
// there so ES modules find them too, and their commands linked into
// /usr/local/bin as npm install -g would (npm itself: npm and npx).
func vendorNpm(ctx context.Context, npm string, pkgs []string, stageDir, cacheDir string, log io.Writer) error {
	work := filepath.Join(stageDir, "npm")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("create npm dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(work, "package.json"), []byte(`{"name":"corral-image","version":"0.0.0","private":true}`+"\n"), 0o644); err != nil {
		return fmt.Errorf("write package.json: %w", err)
	}
	args := []string{"install", "--no-audit", "--no-fund", "--ignore-scripts", "--omit=dev", "--no-update-notifier", "--save-exact"}
	if cacheDir != "" {
		args = append(args, "--cache", filepath.Join(cacheDir, "npm"))
	}
	args = append(args, pkgs...)
	fmt.Fprintf(log, "\n$ %s %s\n", npm, shellQuote(args))
	cmd := exec.CommandContext(ctx, npm, args...)
	cmd.Dir = work
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm install: %w", err)
	}
	rootfs := filepath.Join(stageDir, "rootfs")
	dst := filepath.Join(rootfs, "usr", "local", "lib", "node_modules")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("vendor npm packages: %w", err)
	}
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("vendor npm packages: %w", err)
	}
	if err := os.Rename(filepath.Join(work, "node_modules"), dst); err != nil {
		return fmt.Errorf("vendor npm packages: %w", err)
	}
	if err := os.Symlink("usr/local/lib/node_modules", filepath.Join(rootfs, "node_modules")); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("vendor npm packages: %w", err)
	}
	for _, p := range pkgs {
		if err := linkNpmBins(rootfs, npmName(p)); err != nil {
			return fmt.Errorf("vendor npm packages: %w", err)
		}
	}
	// The lock file records what npm resolved, for the record.
	if err := os.Rename(filepath.Join(work, "package-lock.json"), filepath.Join(stageDir, "npm-lock.json")); err != nil {
		return fmt.Errorf("keep npm lock file: %w", err)
	}
	return os.RemoveAll(work)
}

// writePackageList records the Debian packages installed, "name version"
// per line: with the recipe, what the image is made of.
func writePackageList(rootfs, dst string) error {
	lines, err := PackageList(rootfs)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// PackageList returns the Debian packages installed in rootfs as sorted
// "name version" lines, from dpkg's status file.
func PackageList(rootfs string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(rootfs, "var", "lib", "dpkg", "status"))
	if err != nil {
		return nil, fmt.Errorf("read dpkg status: %w", err)
	}
	var lines []string
	for _, para := range strings.Split(string(b), "\n\n") {
		var name, version, status string
		for _, l := range strings.Split(para, "\n") {
			switch k, v, _ := strings.Cut(l, ": "); k {
			case "Package":
				name = v
			case "Version":
				version = v
			case "Status":
				status = v
			}
		}
		if name != "" && status == "install ok installed" {
			lines = append(lines, name+" "+version)
		}
	}
	slices.Sort(lines)
	return lines, nil
}

// npmName is the package name of an exact "name@version" (scopes kept).
func npmName(spec string) string {
	if i := strings.LastIndex(spec, "@"); i > 0 {
		return spec[:i]
	}
	return spec
}

// linkNpmBins links the commands vendored package name declares ("bin" in
// its package.json: one named after the package, or a map) into
// /usr/local/bin of rootfs, executable.
func linkNpmBins(rootfs, name string) error {
	dir := filepath.Join("usr", "local", "lib", "node_modules", name)
	b, err := os.ReadFile(filepath.Join(rootfs, dir, "package.json"))
	if err != nil {
		return err
	}
	var meta struct {
		Bin json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%s/package.json: %w", name, err)
	}
	bins := map[string]string{}
	var one string
	switch {
	case len(meta.Bin) == 0:
		return nil
	case json.Unmarshal(meta.Bin, &one) == nil:
		bins[path.Base(name)] = one
	default:
		if err := json.Unmarshal(meta.Bin, &bins); err != nil {
			return fmt.Errorf("%s/package.json: bin: %w", name, err)
		}
	}
	binDir := filepath.Join(rootfs, "usr", "local", "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	for cmd, target := range bins {
		if cmd != path.Base(cmd) || cmd == "." || cmd == ".." || strings.HasPrefix(path.Clean(target), "..") || path.IsAbs(target) {
			return fmt.Errorf("%s/package.json: bin %q: %q leads outside the package", name, cmd, target)
		}
		if err := os.Chmod(filepath.Join(rootfs, dir, target), 0o755); err != nil {
			return err
		}
		link := filepath.Join(binDir, cmd)
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Join("..", "lib", "node_modules", name, target), link); err != nil {
			return err
		}
	}
	return nil
}
