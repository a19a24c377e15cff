package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	recipes "github.com/corralhq/corral/images"
	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
)

// imageFlagNames are the settings the image command reads: the data
// directory and the image store's; run and serve read all of config.Local.
var imageFlagNames = []string{"data-dir", "image-dir", "image-budget", "default-images"}

// imageStore opens the image store lc describes.
func imageStore(lc config.Local, log *slog.Logger) (*images.Store, error) {
	dir := lc.Images.Dir
	if dir == "" {
		dir = filepath.Join(lc.DataDir, "images")
	}
	defaults := map[string]string{}
	for l, img := range lc.Images.Defaults {
		r, ok := lang.Get(l)
		if !ok {
			return nil, fmt.Errorf("default images: unknown language %q (languages: %s)", l, strings.Join(lang.Names(), ", "))
		}
		defaults[r.Name()] = img
	}
	return images.New(images.Config{Dir: dir, UID: sandboxUID, GID: sandboxGID, Budget: int64(lc.Images.Budget), Defaults: defaults, Log: log}), nil
}

// warnMissingDefaults logs configured default images that are not built:
// their languages' requests get a 400 naming the image until they are.
func warnMissingDefaults(store *images.Store, defaults config.ImageMap, log *slog.Logger) {
	for l, name := range defaults {
		if _, err := store.Resolve(name); err != nil {
			log.Warn("default image unavailable; requests that need it are refused until it is built or imported",
				"language", l, "image", name, "err", err)
		}
	}
}

const imageUsage = `usage: corral image <command> [flags] [args]

commands:
  build NAME...     build images from their recipes (images/NAME.toml)
  import FILE.tar   import a docker save or OCI layout tarball
  ls                list images: size, last use, digest
  rm NAME...        remove images

Builds, imports and removals need root. Run "corral image <command> -h" for flags.
`

// cmdImage manages the images sandboxes run on.
func cmdImage(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, imageUsage)
		return 2
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "build":
		return imageBuild(rest)
	case "import":
		return imageImport(rest)
	case "ls", "list":
		return imageList(rest)
	case "rm", "remove":
		return imageRemove(rest)
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, imageUsage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "corral image: unknown command %q\n\n%s", sub, imageUsage)
	return 2
}

// imageFlags parses a subcommand's flags and opens the store.
func imageFlags(set *flag.FlagSet, args []string, usage string) (*images.Store, int) {
	lc := config.DefaultLocal()
	config.RegisterFlags(set, &lc, imageFlagNames...)
	set.Usage = func() {
		fmt.Fprintln(set.Output(), usage)
		set.PrintDefaults()
	}
	if _, err := parseFlags(set, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if err := lc.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "corral image %s: %v\n", set.Name(), err)
		return nil, 2
	}
	store, err := imageStore(lc, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral image %s: %v\n", set.Name(), err)
		return nil, 2
	}
	return store, -1
}

func needRoot(cmd string) bool {
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "corral image %s: must run as root (mmdebstrap's chroot, file ownership)\n", cmd)
		return false
	}
	return true
}

func imageBuild(args []string) int {
	set := flag.NewFlagSet("build", flag.ContinueOnError)
	force := set.Bool("force", false, "rebuild even if the image is up to date")
	recipeDir := set.String("recipes", "", "directory of NAME.toml recipes (default: the ones built into corral)")
	buildCache := set.String("build-cache", "/var/cache/corral", "directory keeping downloaded packages between builds (empty: none)")
	verbose := set.Bool("v", false, "print the build log as it is written instead of a progress bar")
	store, code := imageFlags(set, args, "usage: corral image build [flags] NAME...\n\nBuilds images from recipes with mmdebstrap. An image already built from the same recipe is kept as it is.")
	if store == nil {
		return code
	}
	var src fs.FS = recipes.Recipes
	if *recipeDir != "" {
		src = os.DirFS(*recipeDir)
	}
	if set.NArg() == 0 {
		names, _ := images.Recipes(src)
		fmt.Fprintf(os.Stderr, "corral image build: name a recipe: %s\n", strings.Join(names, ", "))
		return 2
	}
	if !needRoot("build") {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	status := 0
	for _, name := range set.Args() {
		r, err := images.LoadRecipe(src, name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corral image build: %v\n", err)
			status = 1
			continue
		}
		fmt.Fprintf(os.Stderr, "%s: build log %s\n", name, store.LogPath(name))
		opts := images.BuildOptions{Force: *force, CacheDir: *buildCache}
		var bar *progress
		if *verbose {
			opts.Output = os.Stderr
		} else {
			bar = newProgress(os.Stderr, name)
			opts.Progress = bar.update
		}
		start := time.Now()
		info, err := store.Build(ctx, r, opts)
		bar.finish()
		reportEvicted(info.Evicted)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "corral image build: %v\n", err)
			status = 1
		case info.Cached:
			fmt.Printf("%s: up to date (%s, %s); --force rebuilds\n", name, info.Digest, images.FormatSize(info.Size))
		default:
			fmt.Printf("%s: built in %s: %s, %s\n", name, time.Since(start).Round(time.Second), info.Digest, images.FormatSize(info.Size))
		}
		if ctx.Err() != nil {
			return 130
		}
	}
	return status
}

func imageImport(args []string) int {
	set := flag.NewFlagSet("import", flag.ContinueOnError)
	name := set.String("name", "", "image name (default: from the file name)")
	store, code := imageFlags(set, args, "usage: corral image import [flags] FILE.tar\n\nImports a `docker save` tarball or an OCI image layout tarball (optionally gzipped).")
	if store == nil {
		return code
	}
	if set.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "corral image import: give one archive")
		return 2
	}
	if !needRoot("import") {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	file := set.Arg(0)
	n := *name
	if n == "" {
		n = images.NameFromFile(file)
	}
	bar := newProgress(os.Stderr, n)
	start := time.Now()
	info, err := store.Import(ctx, file, images.ImportOptions{Name: n, Progress: bar.update})
	bar.finish()
	reportEvicted(info.Evicted)
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral image import: %v\n", err)
		return 1
	}
	fmt.Printf("%s: imported from %s in %s: %s, %s\n", info.Name, info.Origin, time.Since(start).Round(time.Millisecond), info.Digest, images.FormatSize(info.Size))
	return 0
}

func reportEvicted(names []string) {
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "evicted %s (least recently used, not in use) to stay within the image budget\n", n)
	}
}

func imageList(args []string) int {
	set := flag.NewFlagSet("ls", flag.ContinueOnError)
	asJSON := set.Bool("json", false, "print JSON")
	store, code := imageFlags(set, args, "usage: corral image ls [flags]")
	if store == nil {
		return code
	}
	list, err := store.List()
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral image ls: %v\n", err)
		return 1
	}
	if *asJSON {
		if list == nil {
			list = []images.Info{}
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(list)
		return 0
	}
	var total int64
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tSIZE\tLAST USED\tDIGEST")
	fmt.Fprintf(tw, "%s\tbuilt in\t-\t-\thost /usr, read-only\n", images.HostName)
	now := time.Now()
	for _, i := range list {
		used := ago(now, i.LastUsed)
		if i.InUse {
			used = "in use"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", i.Name, i.Source, images.FormatSize(i.Size), used, shortDigest(i.Digest))
		total += i.Size
	}
	tw.Flush()
	fmt.Printf("\n%s of %s budget used\n", images.FormatSize(total), images.FormatSize(store.Budget()))
	return 0
}

func imageRemove(args []string) int {
	set := flag.NewFlagSet("rm", flag.ContinueOnError)
	store, code := imageFlags(set, args, "usage: corral image rm NAME...")
	if store == nil {
		return code
	}
	if set.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "corral image rm: name an image")
		return 2
	}
	if !needRoot("rm") {
		return 1
	}
	status := 0
	for _, name := range set.Args() {
		deferred, err := store.Remove(name)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "corral image rm: %v\n", err)
			status = 1
		case deferred:
			fmt.Printf("removed %s (its files go when the sandboxes running on it end)\n", name)
		default:
			fmt.Printf("removed %s\n", name)
		}
	}
	return status
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// ago prints how long ago t was, coarsely.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return plural(int(d.Minutes()), "minute") + " ago"
	case d < 48*time.Hour:
		return plural(int(d.Hours()), "hour") + " ago"
	}
	return plural(int(d.Hours()/24), "day") + " ago"
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// progress shows a build's or import's progress: a bar redrawn in place on
// a terminal, otherwise a plain line whenever the stage changes.
type progress struct {
	w     io.Writer
	name  string
	tty   bool
	start time.Time
	stop  chan struct{}
	done  chan struct{}

	// mu guards what the ticker redraws.
	mu    sync.Mutex
	stage string
	frac  float64
	shown string // the last stage printed as a plain line
}

func newProgress(f *os.File, name string) *progress {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	p := &progress{w: f, name: name, tty: err == nil, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	if !p.tty {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.draw()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *progress) update(stage string, frac float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stage, p.frac = stage, min(max(frac, 0), 1)
	if p.tty {
		p.draw()
		return
	}
	// One line per stage, not per package.
	head, _, _ := strings.Cut(stage, " (")
	if head != p.shown {
		p.shown = head
		fmt.Fprintf(p.w, "%s: %3.0f%% %s (%s)\n", p.name, p.frac*100, head, time.Since(p.start).Round(time.Second))
	}
}

const barWidth = 30

func (p *progress) draw() {
	n := int(p.frac * barWidth)
	bar := strings.Repeat("#", n) + strings.Repeat(".", barWidth-n)
	fmt.Fprintf(p.w, "\r\033[K%s [%s] %3.0f%% %s %s", p.name, bar, p.frac*100, p.stage, time.Since(p.start).Round(time.Second))
}

// finish ends the bar's line. A nil progress does nothing.
func (p *progress) finish() {
	if p == nil {
		return
	}
	if p.tty {
		close(p.stop)
		<-p.done
		fmt.Fprint(p.w, "\r\033[K")
		return
	}
	<-p.done
}
