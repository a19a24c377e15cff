package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// Recipe says how to build an image from Debian packages: a suite and
// mirror, the packages, npm packages to vendor, and environment variables.
// Recipes live in the repository's images/*.toml, one per image, named by
// the file.
type Recipe struct {
	Name        string `toml:"-"`
	Description string `toml:"description"`
	// Suite and Mirror are mmdebstrap's SUITE and MIRROR; Sources are
	// further apt lines (updates, security, backports).
	Suite   string   `toml:"suite"`
	Mirror  string   `toml:"mirror"`
	Sources []string `toml:"sources"`
	// Variant is mmdebstrap's: apt (Essential and apt) or minbase.
	Variant string `toml:"variant"`
	// Packages are Debian packages, optionally pkg/release.
	Packages []string `toml:"packages"`
	// Purge are packages removed after installation, dependencies or not
	// (dpkg --force-depends): build-time-only packages that a dependency
	// drags in, such as the compilers python3-scipy's python3-pythran
	// wants. The image never runs apt, so the broken dependencies do not
	// matter; what the image's programs import is tested.
	Purge []string `toml:"purge"`
	// Npm are registry packages (name@version) installed with the host's
	// npm, scripts disabled, into /usr/local/lib/node_modules.
	Npm []string `toml:"npm"`
	// Env is added to every program's environment in the image.
	Env map[string]string `toml:"env"`
	// Include merges other recipes: their packages, npm packages and
	// environment join this one's; suite, mirror and sources come from the
	// first included recipe unless this one sets them.
	Include []string `toml:"include"`
	// SourceDateEpoch clamps timestamps so builds from the same mirror
	// state are alike (mmdebstrap's SOURCE_DATE_EPOCH).
	SourceDateEpoch int64 `toml:"source_date_epoch"`
}

// defaultEpoch is 2025-01-01T00:00:00Z.
const defaultEpoch = 1735689600

// ErrRecipe is a recipe that cannot be built as written.
var ErrRecipe = errors.New("bad recipe")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckName reports whether name may name an image.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("image name %q: use 1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	if name == HostName {
		return fmt.Errorf("image name %q is the built-in image", name)
	}
	return nil
}

// Recipes lists the names of the recipes in fsys (NAME.toml files).
func Recipes(fsys fs.FS) ([]string, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("list recipes: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".toml"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	return names, nil
}

// LoadRecipe reads NAME.toml from fsys, merges its includes and checks it.
func LoadRecipe(fsys fs.FS, name string) (Recipe, error) {
	return loadRecipe(fsys, name, nil)
}

func loadRecipe(fsys fs.FS, name string, seen []string) (Recipe, error) {
	if err := CheckName(name); err != nil {
		return Recipe{}, err
	}
	if slices.Contains(seen, name) {
		return Recipe{}, fmt.Errorf("%w %s: includes itself (%s)", ErrRecipe, name, strings.Join(append(seen, name), " → "))
	}
	b, err := fs.ReadFile(fsys, name+".toml")
	if errors.Is(err, fs.ErrNotExist) {
		known, _ := Recipes(fsys)
		return Recipe{}, fmt.Errorf("no recipe %q (recipes: %s): %w", name, strings.Join(known, ", "), err)
	}
	if err != nil {
		return Recipe{}, fmt.Errorf("read recipe %s: %w", name, err)
	}
	r, err := ParseRecipe(name, b)
	if err != nil {
		return Recipe{}, err
	}
	for _, inc := range r.Include {
		sub, err := loadRecipe(fsys, inc, append(seen, name))
		if err != nil {
			return Recipe{}, fmt.Errorf("recipe %s: include %s: %w", name, inc, err)
		}
		r.merge(sub)
	}
	r.Include = nil
	// What one recipe purges another may want.
	r.Purge = slices.DeleteFunc(r.Purge, func(p string) bool { return slices.Contains(r.Packages, p) })
	if err := r.check(); err != nil {
		return Recipe{}, err
	}
	return r, nil
}

// ParseRecipe decodes one recipe file; unknown keys are an error. Includes
// are not resolved.
func ParseRecipe(name string, data []byte) (Recipe, error) {
	var r Recipe
	md, err := toml.Decode(string(data), &r)
	if err != nil {
		return Recipe{}, fmt.Errorf("%w %s: %w", ErrRecipe, name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return Recipe{}, fmt.Errorf("%w %s: unknown settings %s", ErrRecipe, name, strings.Join(keys, ", "))
	}
	r.Name = name
	return r, nil
}

// merge adds an included recipe.
func (r *Recipe) merge(sub Recipe) {
	if r.Suite == "" {
		r.Suite = sub.Suite
	}
	if r.Mirror == "" {
		r.Mirror = sub.Mirror
	}
	if r.Variant == "" {
		r.Variant = sub.Variant
	}
	if r.SourceDateEpoch == 0 {
		r.SourceDateEpoch = sub.SourceDateEpoch
	}
	r.Sources = union(r.Sources, sub.Sources)
	r.Packages = union(r.Packages, sub.Packages)
	r.Purge = union(r.Purge, sub.Purge)
	r.Npm = union(r.Npm, sub.Npm)
	if len(sub.Env) > 0 && r.Env == nil {
		r.Env = map[string]string{}
	}
	for k, v := range sub.Env {
		if _, set := r.Env[k]; !set {
			r.Env[k] = v
		}
	}
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

var (
	pkgRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(/[a-z0-9.-]+)?$`)
	npmRE = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*@[0-9A-Za-z.+-]+$`)
	envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// reservedImageEnv are set by the engine for every program; an image may
// not change them.
var reservedImageEnv = map[string]bool{"HOME": true, "USER": true, "LOGNAME": true, "TMPDIR": true, "PWD": true, "HOSTNAME": true}

func (r *Recipe) check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w %s: "+format, append([]any{ErrRecipe, r.Name}, args...)...))
	}
	if r.Suite == "" || !pkgRE.MatchString(r.Suite) {
		bad("suite %q: a Debian suite such as bookworm", r.Suite)
	}
	if !strings.HasPrefix(r.Mirror, "http://") && !strings.HasPrefix(r.Mirror, "https://") {
		bad("mirror %q: an http(s) URL", r.Mirror)
	}
	for _, s := range r.Sources {
		if !strings.HasPrefix(s, "deb ") || strings.ContainsAny(s, "\n'\"") {
			bad("source %q: one apt line starting with \"deb \"", s)
		}
	}
	switch r.Variant {
	case "":
		r.Variant = "apt"
	case "apt", "minbase":
	default:
		bad("variant %q: use apt or minbase", r.Variant)
	}
	if len(r.Packages) == 0 {
		bad("no packages")
	}
	for _, p := range r.Packages {
		if !pkgRE.MatchString(p) {
			bad("package %q is not a Debian package name", p)
		}
	}
	for _, p := range r.Purge {
		if !pkgRE.MatchString(p) || strings.Contains(p, "/") {
			bad("purge %q is not a Debian package name", p)
		}
	}
	for _, p := range r.Npm {
		if !npmRE.MatchString(p) {
			bad("npm package %q: name@version with an exact version", p)
		}
	}
	for k := range r.Env {
		if !envRE.MatchString(k) || reservedImageEnv[k] || strings.HasPrefix(k, "CORRAL_") {
			bad("env %q cannot be set by an image", k)
		}
	}
	if r.SourceDateEpoch == 0 {
		r.SourceDateEpoch = defaultEpoch
	}
	return errors.Join(errs...)
}

// EnvList returns the recipe's environment as sorted KEY=VALUE pairs.
func (r Recipe) EnvList() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		out = append(out, k+"="+r.Env[k])
	}
	return out
}

// buildVersion changes whenever the build or Corral's layout changes in a
// way that makes earlier builds stale.
const buildVersion = "1"

// Hash identifies what a build of r produces: the resolved recipe, the
// sandbox user and the build code's version. A build whose hash matches the
// installed image's is a no-op.
func (r Recipe) Hash(uid, gid int) string {
	c := r
	c.Name, c.Description = "", ""
	c.Packages = slices.Sorted(slices.Values(r.Packages))
	c.Npm = slices.Sorted(slices.Values(r.Npm))
	c.Purge = slices.Sorted(slices.Values(r.Purge))
	b, _ := json.Marshal(struct {
		Recipe
		Build       string
		MountPoints []string
		UID, GID    int
	}{c, buildVersion, mountPoints, uid, gid})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
