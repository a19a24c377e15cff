package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkNpmBins: a vendored package's commands are linked into
// /usr/local/bin (a string bin is named after the package, a scoped one
// after its last part; a map names each), made executable, and a bin that
// leads outside its package is refused.
func TestLinkNpmBins(t *testing.T) {
	rootfs := t.TempDir()
	pkg := func(name, json string, files ...string) {
		dir := filepath.Join(rootfs, "usr/local/lib/node_modules", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/usr/bin/env node\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(json), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkg("npm", `{"bin":{"npm":"bin/npm-cli.js","npx":"bin/npx-cli.js"}}`, "bin/npm-cli.js", "bin/npx-cli.js")
	pkg("@scope/tool", `{"bin":"cli.js"}`, "cli.js")
	pkg("lib", `{"main":"index.js"}`, "index.js")
	pkg("evil", `{"bin":{"x":"../../../../../bin/sh"}}`)
	pkg("evil2", `{"bin":{"../x":"cli.js"}}`, "cli.js")
	for _, name := range []string{"npm@10.9.2", "@scope/tool@1.0.0", "lib@1.0.0"} {
		if err := linkNpmBins(rootfs, npmName(name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for cmd, want := range map[string]string{
		"npm":  "../lib/node_modules/npm/bin/npm-cli.js",
		"npx":  "../lib/node_modules/npm/bin/npx-cli.js",
		"tool": "../lib/node_modules/@scope/tool/cli.js",
	} {
		link := filepath.Join(rootfs, "usr/local/bin", cmd)
		got, err := os.Readlink(link)
		if err != nil || got != want {
			t.Errorf("%s → %q (%v), want %q", cmd, got, err, want)
			continue
		}
		if fi, err := os.Stat(link); err != nil || fi.Mode().Perm()&0o111 != 0o111 {
			t.Errorf("%s is not executable: %v %v", cmd, fi.Mode(), err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(rootfs, "usr/local/bin")); len(entries) != 3 {
		t.Errorf("usr/local/bin holds %d entries, want 3", len(entries))
	}
	for _, name := range []string{"evil", "evil2"} {
		if err := linkNpmBins(rootfs, name); err == nil || !strings.Contains(err.Error(), "outside the package") {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}
