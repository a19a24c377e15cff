// Command image builds Corral's own container image without a Docker
// daemon (`make image`): the Debian packages of recipe.toml through
// mmdebstrap (internal/images.Bootstrap, as sandbox images are built), the
// pinned runc and runsc from /opt/corral, and the static corral and
// corral-agent binaries, written as an OCI image layout and a `docker load`
// archive by internal/images.Export. The same commit, recipe, package
// versions and runtimes give the same digest: timestamps are the recipe's
// source_date_epoch, entries are sorted, owners numeric, and files whose
// content depends on when or how often the build ran are removed.
// packages.lock pins the Debian package versions: a build that resolves
// others fails (-lock=check) unless told to record them (-lock=update).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/corralhq/corral/internal/images"
)

type options struct {
	recipe, lock, lockMode     string
	out, ref                   string
	corral, agent, runtimesDir string
	entrypoint                 string
	cache                      string
	verbose                    bool
}

func main() {
	var o options
	flag.StringVar(&o.recipe, "recipe", "deploy/image/recipe.toml", "the image's Debian recipe (internal/images.Recipe)")
	flag.StringVar(&o.lock, "lock", "deploy/image/packages.lock", "the pinned Debian package versions")
	flag.StringVar(&o.lockMode, "lock-mode", "check", "check: fail if the build resolves other versions; warn: say so and go on; update: rewrite the lock")
	flag.StringVar(&o.out, "out", "bin/image", "output directory: oci/ (an OCI image layout), corral-image.tar (docker load), digest")
	flag.StringVar(&o.ref, "ref", "corralhq/corral:dev", "the image's name and tag")
	flag.StringVar(&o.corral, "corral", "bin/corral", "the static corral binary")
	flag.StringVar(&o.agent, "agent", "bin/corral-agent", "the static corral-agent binary")
	flag.StringVar(&o.entrypoint, "entrypoint", "deploy/image/entrypoint.sh", "the image's entrypoint script (cgroup v2 set-up, then corral)")
	flag.StringVar(&o.runtimesDir, "runtimes", "/opt/corral", "where scripts/deps.sh installed the pinned runc and runsc (bin/, *.version)")
	flag.StringVar(&o.cache, "cache", "/var/cache/corral", "downloaded .deb files (debs/SUITE) and the build's scratch space, outside the clone")
	flag.BoolVar(&o.verbose, "v", false, "print mmdebstrap's log as it runs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := build(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// imageConfig is how the image runs: corral serve on every interface (a
// pod's network namespace is its own), data under /var/lib/corral, through
// corral-entrypoint (entrypoint.sh: cgroup v2 delegation inside the
// container).
func imageConfig(ref string) v1.Config {
	return v1.Config{
		Entrypoint: []string{"/usr/local/bin/corral-entrypoint"},
		Cmd:        []string{"serve"},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"CORRAL_LISTEN=0.0.0.0:8080",
			"CORRAL_DATA_DIR=/var/lib/corral",
		},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		Volumes:      map[string]struct{}{"/var/lib/corral": {}},
		WorkingDir:   "/",
		StopSignal:   "SIGTERM",
		Labels: map[string]string{
			"org.opencontainers.image.title":  "corral",
			"org.opencontainers.image.source": "https://github.com/corralhq/corral",
		},
	}
}

// emptyDirs are kept as mount points without their contents.
var emptyDirs = []string{"dev", "proc", "sys", "run", "tmp", "var/tmp", "var/lib/corral"}

// volatile are files whose content depends on when the build ran (logs,
// caches keyed by time) or that a running container rewrites; removed
// before export.
var volatile = []string{
	"var/log/dpkg.log", "var/log/alternatives.log", "var/log/bootstrap.log",
	"var/log/apt/history.log", "var/log/apt/term.log", "var/log/apt/eipp.log.xz",
	"var/cache/ldconfig/aux-cache",
	"var/cache/debconf/config.dat-old", "var/cache/debconf/templates.dat-old",
	"var/lib/dpkg/status-old", "var/lib/dpkg/diversions-old",
	"var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin",
	"etc/machine-id", "var/lib/dbus/machine-id",
}

func build(ctx context.Context, o options) error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root (mmdebstrap's root mode chroots and mounts)")
	}
	switch o.lockMode {
	case "check", "warn", "update":
	default:
		return fmt.Errorf("-lock-mode %q: check, warn or update", o.lockMode)
	}
	start := time.Now()
	data, err := os.ReadFile(o.recipe)
	if err != nil {
		return err
	}
	r, err := images.ParseRecipe("corral", data)
	if err != nil {
		return err
	}
	files, err := payload(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(o.cache, "image-build"), 0o700); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(filepath.Join(o.cache, "image-build"), "stage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	rootfs := filepath.Join(stage, "rootfs")
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(o.out, "build.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	var log io.Writer = logf
	if o.verbose {
		log = io.MultiWriter(logf, os.Stderr)
	}
	fmt.Fprintf(os.Stderr, "image: mmdebstrap %s (%s; log %s)\n", r.Suite, strings.Join(r.Packages, " "), logPath)
	if err := images.Bootstrap(ctx, r, rootfs, images.BuildOptions{CacheDir: o.cache}, log); err != nil {
		return fmt.Errorf("%w (log: %s)", err, logPath)
	}
	pkgs, err := images.PackageList(rootfs)
	if err != nil {
		return err
	}
	if err := checkLock(o, pkgs); err != nil {
		return err
	}
	for _, v := range volatile {
		if err := os.Remove(filepath.Join(rootfs, v)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := trimDocs(rootfs); err != nil {
		return err
	}
	for _, f := range files {
		if err := install(rootfs, f); err != nil {
			return err
		}
	}
	for _, d := range []string{"etc/corral", "var/lib/corral"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	fmt.Fprintln(os.Stderr, "image: writing the OCI layout and the docker archive")
	ex, err := images.Export(ctx, rootfs, images.ExportConfig{
		Ref: o.ref, Epoch: r.SourceDateEpoch, Config: imageConfig(o.ref), Empty: emptyDirs,
		CreatedBy: "make image (deploy/image): mmdebstrap " + r.Suite + " + corral, runc, runsc",
	}, filepath.Join(stage, "export"), filepath.Join(o.out, "oci"), filepath.Join(o.out, "corral-image.tar"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "digest"), []byte(ex.Digest+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "packages.txt"), []byte(strings.Join(pkgs, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("image %s\ndigest %s\nsize %s compressed, %s unpacked (%d Debian packages)\nlayout %s\ndocker archive %s\nbuilt in %s\n",
		o.ref, ex.Digest, images.FormatSize(ex.LayerBytes), images.FormatSize(ex.TarBytes), len(pkgs),
		filepath.Join(o.out, "oci"), filepath.Join(o.out, "corral-image.tar"), time.Since(start).Round(time.Second))
	return nil
}

// trimDocs removes manual pages, info pages, translations and package
// documentation other than the copyright files (what Debian's slim
// container images leave out too): nobody reads them in a container.
func trimDocs(rootfs string) error {
	for _, dir := range []string{"usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/doc"} {
		root := filepath.Join(rootfs, dir)
		entries, err := os.ReadDir(root)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(root, e.Name())
			if dir == "usr/share/locale" && e.Name() == "locale.alias" {
				continue
			}
			if dir != "usr/share/doc" || !e.IsDir() {
				if err := os.RemoveAll(p); err != nil {
					return err
				}
				continue
			}
			docs, err := os.ReadDir(p)
			if err != nil {
				return err
			}
			for _, d := range docs {
				if d.Name() != "copyright" {
					if err := os.RemoveAll(filepath.Join(p, d.Name())); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// file is one file the image gets besides its packages.
type file struct{ src, dst string }

// payload lists the binaries and version files, checking they are there:
// the corral binaries static (they also run as the sandbox agent), the
// runtimes the pinned ones.
func payload(o options) ([]file, error) {
	files := []file{
		{o.entrypoint, "usr/local/bin/corral-entrypoint"},
		{o.corral, "usr/local/bin/corral"},
		{o.agent, "usr/local/bin/corral-agent"},
	}
	for _, rt := range []string{"runc", "runsc"} {
		files = append(files,
			file{filepath.Join(o.runtimesDir, "bin", rt), "opt/corral/bin/" + rt},
			file{filepath.Join(o.runtimesDir, rt+".version"), "opt/corral/" + rt + ".version"})
	}
	var missing []string
	for _, f := range files {
		if _, err := os.Stat(f.src); err != nil {
			missing = append(missing, f.src)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s: make image builds the binaries; scripts/deps.sh image the runtimes", strings.Join(missing, ", "))
	}
	return files, nil
}

// install copies f into rootfs, owned by root, executable unless it is a
// version file.
func install(rootfs string, f file) error {
	b, err := os.ReadFile(f.src)
	if err != nil {
		return err
	}
	dst := filepath.Join(rootfs, f.dst)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o755)
	if strings.HasSuffix(f.dst, ".version") {
		mode = 0o644
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		return err
	}
	if err := os.Chown(dst, 0, 0); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// checkLock compares the resolved packages with the lock file.
func checkLock(o options, pkgs []string) error {
	body := "# Debian packages of Corral's image (deploy/image/recipe.toml), as resolved\n" +
		"# by the last `make image IMAGE_LOCK=update`. `make image` fails when the\n" +
		"# mirror resolves other versions (a point release or a security update):\n" +
		"# review the change, then update the lock.\n" + strings.Join(pkgs, "\n") + "\n"
	if o.lockMode == "update" {
		return os.WriteFile(o.lock, []byte(body), 0o644)
	}
	b, err := os.ReadFile(o.lock)
	if err != nil {
		return fmt.Errorf("read the package lock: %w (make image IMAGE_LOCK=update writes it)", err)
	}
	var locked []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			locked = append(locked, l)
		}
	}
	var diff []string
	for _, l := range locked {
		if !slices.Contains(pkgs, l) {
			diff = append(diff, "- "+l)
		}
	}
	for _, p := range pkgs {
		if !slices.Contains(locked, p) {
			diff = append(diff, "+ "+p)
		}
	}
	if len(diff) == 0 {
		return nil
	}
	msg := fmt.Sprintf("the mirror resolved other packages than %s:\n%s", o.lock, strings.Join(diff, "\n"))
	if o.lockMode == "warn" {
		fmt.Fprintln(os.Stderr, "image: warning:", msg)
		return nil
	}
	return errors.New(msg + "\nreview, then make image IMAGE_LOCK=update")
}
