package images

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	recipes "github.com/corralhq/corral/images"
)

// Every recipe in the repository loads and passes its checks.
func TestRepositoryRecipes(t *testing.T) {
	names, err := Recipes(recipes.Recipes)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bash", "full", "go", "node", "python"} {
		if !slices.Contains(names, want) {
			t.Errorf("no recipe %s in %v", want, names)
		}
	}
	for _, n := range names {
		r, err := LoadRecipe(recipes.Recipes, n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if r.Name != n || r.Variant == "" || r.SourceDateEpoch == 0 {
			t.Errorf("%s: not filled in: %+v", n, r)
		}
	}
	py, _ := LoadRecipe(recipes.Recipes, "python")
	for _, p := range []string{"python3-numpy", "python3-pandas", "python3-matplotlib", "python3-scipy", "python3-requests"} {
		if !slices.Contains(py.Packages, p) {
			t.Errorf("python recipe lacks %s", p)
		}
	}
	// full is the union of the others.
	full, _ := LoadRecipe(recipes.Recipes, "full")
	for _, n := range []string{"python", "node", "go", "bash"} {
		r, _ := LoadRecipe(recipes.Recipes, n)
		for _, p := range r.Packages {
			if !slices.Contains(full.Packages, p) {
				t.Errorf("full lacks %s's package %s", n, p)
			}
		}
		for _, p := range r.Npm {
			if !slices.Contains(full.Npm, p) {
				t.Errorf("full lacks %s's npm package %s", n, p)
			}
		}
		for k, v := range r.Env {
			if full.Env[k] != v {
				t.Errorf("full's %s = %q, want %s's %q", k, full.Env[k], n, v)
			}
		}
	}
	for _, p := range full.Purge {
		if slices.Contains(full.Packages, p) {
			t.Errorf("full purges %s, which it installs", p)
		}
	}
}

func TestRecipeErrors(t *testing.T) {
	base := "suite = \"bookworm\"\nmirror = \"http://deb.debian.org/debian\"\npackages = [\"bash\"]\n"
	for _, tc := range []struct {
		name, body, want string
	}{
		{"unknown key", base + "pakages = [\"x\"]\n", "unknown settings pakages"},
		{"bad package", "suite = \"bookworm\"\nmirror = \"http://x\"\npackages = [\"bash; rm -rf /\"]\n", "not a Debian package name"},
		{"no packages", "suite = \"bookworm\"\nmirror = \"http://x\"\n", "no packages"},
		{"bad mirror", "suite = \"bookworm\"\nmirror = \"ftp://x\"\npackages = [\"bash\"]\n", "mirror"},
		{"bad source", base + "sources = [\"deb x\\ndeb y\"]\n", "source"},
		{"npm without version", base + "npm = [\"lodash\"]\n", "exact version"},
		{"reserved env", base + "[env]\nHOME = \"/root\"\n", "HOME"},
		{"bad variant", base + "variant = \"buildd\"\n", "variant"},
		{"include loop", base + "include = [\"loop\"]\n", "includes itself"},
		{"missing include", base + "include = [\"nope\"]\n", "no recipe \"nope\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{"loop.toml": {Data: []byte(tc.body)}}
			_, err := LoadRecipe(fsys, "loop")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := LoadRecipe(fstest.MapFS{}, "host"); err == nil {
		t.Error("a recipe may not be called host")
	}
	if _, err := LoadRecipe(fstest.MapFS{}, "../x"); err == nil {
		t.Error("a recipe name with a path was accepted")
	}
}

func TestRecipeHash(t *testing.T) {
	fsys := fstest.MapFS{
		"a.toml": {Data: []byte("suite = \"bookworm\"\nmirror = \"http://m\"\npackages = [\"bb\", \"aa\"]\ndescription = \"one\"\n")},
		"b.toml": {Data: []byte("suite = \"bookworm\"\nmirror = \"http://m\"\npackages = [\"aa\", \"bb\"]\ndescription = \"two\"\n")},
		"c.toml": {Data: []byte("suite = \"bookworm\"\nmirror = \"http://m\"\npackages = [\"aa\", \"bb\", \"cc\"]\n")},
	}
	load := func(n string) Recipe {
		r, err := LoadRecipe(fsys, n)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b, c := load("a"), load("b"), load("c")
	if a.Hash(1000, 1000) != b.Hash(1000, 1000) {
		t.Error("package order or description changed the hash")
	}
	if a.Hash(1000, 1000) == c.Hash(1000, 1000) {
		t.Error("another package did not change the hash")
	}
	if a.Hash(1000, 1000) == a.Hash(1001, 1000) {
		t.Error("the sandbox user did not change the hash")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"20GiB": 20 << 30, "512M": 512 << 20, "1.5g": 3 << 29, "100": 100, "1kb": 1000, "2 MiB": 2 << 20,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1G", "1PiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
}

func TestMmProgress(t *testing.T) {
	var p mmProgress
	var last float64
	lines := []string{
		"I: running apt-get update...",
		"I: downloading packages with apt...",
		"I: extracting archives...",
		"I: installing essential packages...",
		"I: installing remaining packages inside the chroot...",
		"0 upgraded, 4 newly installed, 0 to remove and 0 not upgraded.",
		"Get:1 http://x a", "Get:2 http://x b", "Get:3 http://x c", "Get:4 http://x d",
		"Unpacking a", "Unpacking b", "Unpacking c", "Unpacking d",
		"Setting up a", "Setting up b", "Setting up c", "Setting up d",
		"I: cleaning package lists and apt cache...",
		"I: success in 3.2 seconds",
	}
	var stages []string
	for _, l := range lines {
		stage, frac, ok := p.line(l)
		if !ok {
			continue
		}
		if frac < last {
			t.Errorf("progress went back: %q %.3f < %.3f", l, frac, last)
		}
		last = frac
		stages = append(stages, stage)
	}
	if last != 0.85 {
		t.Errorf("mmdebstrap ends at %.2f, want 0.85", last)
	}
	if !slices.Contains(stages, "configuring packages (4/4)") {
		t.Errorf("no per-package progress in %q", stages)
	}
	if _, _, ok := p.line("random noise"); ok {
		t.Error("noise moved the progress")
	}
}
