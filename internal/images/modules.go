package images

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ModuleIndex lists, per language, the top-level modules a program can
// import in an image: Python's importable top-level modules and packages,
// Node's packages. It is read from the file system (never by running the
// image's code), so building it for an imported image is safe.
type ModuleIndex map[string][]string

// Has reports whether the image has module for language.
func (m ModuleIndex) Has(language, module string) bool {
	_, ok := slices.BinarySearch(m[language], module)
	return ok
}

var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// scanModules builds the index of the root filesystem at dir. env is the
// image's environment (PYTHONPATH and NODE_PATH add directories).
func scanModules(dir string, env []string) (ModuleIndex, error) {
	r, err := openRoot(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	idx := ModuleIndex{}
	if py := pythonModules(r, env); len(py) > 0 {
		idx["python"] = py
	}
	if js := nodeModules(r, env); len(js) > 0 {
		idx["javascript"] = js
	}
	return idx, nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// pathList splits a PATH-like variable into relative paths in the image.
func pathList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ":") {
		if p = strings.TrimPrefix(path.Clean(p), "/"); p != "" && p != "." && !strings.HasPrefix(p, "..") {
			out = append(out, p)
		}
	}
	return out
}

func pythonModules(r *root, env []string) []string {
	var dirs []string
	for _, base := range []string{"usr/lib", "usr/local/lib"} {
		entries, _ := r.ReadDir(base)
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "python3") {
				continue
			}
			d := base + "/" + e.Name()
			dirs = append(dirs, d, d+"/lib-dynload", d+"/site-packages", d+"/dist-packages")
		}
	}
	dirs = append(dirs, pathList(envValue(env, "PYTHONPATH"))...)
	set := map[string]bool{}
	for _, d := range dirs {
		entries, _ := r.ReadDir(d)
		for _, e := range entries {
			n := e.Name()
			switch {
			case e.IsDir() || e.Type()&os.ModeSymlink != 0 && !strings.Contains(n, "."):
				if pyIdent.MatchString(n) && n != "__pycache__" {
					set[n] = true
				}
			case strings.HasSuffix(n, ".py"):
				if m := strings.TrimSuffix(n, ".py"); pyIdent.MatchString(m) {
					set[m] = true
				}
			case strings.HasSuffix(n, ".so"):
				if m, _, _ := strings.Cut(n, "."); pyIdent.MatchString(m) {
					set[m] = true
				}
			}
		}
	}
	return sortedKeys(set)
}

func nodeModules(r *root, env []string) []string {
	dirs := []string{"usr/local/lib/node_modules", "usr/lib/node_modules", "usr/share/nodejs",
		"usr/lib/nodejs", "usr/local/share/nodejs", "usr/local/lib/nodejs", "node_modules"}
	entries, _ := r.ReadDir("usr/lib")
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), "-linux-gnu") {
			dirs = append(dirs, "usr/lib/"+e.Name()+"/nodejs")
		}
	}
	dirs = append(dirs, pathList(envValue(env, "NODE_PATH"))...)
	set := map[string]bool{}
	for _, d := range dirs {
		entries, _ := r.ReadDir(d)
		for _, e := range entries {
			n := e.Name()
			if strings.HasPrefix(n, ".") {
				continue
			}
			if strings.HasPrefix(n, "@") {
				sub, _ := r.ReadDir(d + "/" + n)
				for _, s := range sub {
					if !strings.HasPrefix(s.Name(), ".") {
						set[n+"/"+s.Name()] = true
					}
				}
				continue
			}
			if e.IsDir() || e.Type()&os.ModeSymlink != 0 {
				set[n] = true
			} else if m, ok := strings.CutSuffix(n, ".js"); ok {
				set[m] = true
			}
		}
	}
	return sortedKeys(set)
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func writeIndex(p string, idx ModuleIndex) error {
	b, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return err
	}
	return writeFileAtomic(p, append(b, '\n'), 0o644)
}

func readIndex(p string) (ModuleIndex, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var idx ModuleIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("read module index %s: %w", p, err)
	}
	for _, mods := range idx {
		slices.Sort(mods)
	}
	return idx, nil
}

// ImagesWithModule lists the images (the host image among them) in which a
// program in language can import module, sorted by name.
func (s *Store) ImagesWithModule(language, module string) []string {
	var out []string
	if idx := s.hostIndex(); idx.Has(language, module) {
		out = append(out, HostName)
	}
	recs, _ := s.records()
	for _, r := range recs {
		if s.index(r.Version).Has(language, module) {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (s *Store) index(v string) ModuleIndex {
	s.mu.Lock()
	idx, ok := s.indexes[v]
	s.mu.Unlock()
	if ok {
		return idx
	}
	idx, err := readIndex(filepath.Join(s.versionDir(v), "modules.json"))
	if err != nil {
		return nil
	}
	s.mu.Lock()
	s.indexes[v] = idx
	s.mu.Unlock()
	return idx
}

// forgetIndex drops version v's index from the cache: v is gone.
func (s *Store) forgetIndex(v string) {
	s.mu.Lock()
	delete(s.indexes, v)
	s.mu.Unlock()
}

// hostIndex scans the host's /usr once: the host image runs the host's
// interpreters.
func (s *Store) hostIndex() ModuleIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hostIdx == nil {
		idx, err := scanModules("/", nil)
		if err != nil {
			idx = ModuleIndex{}
		}
		s.hostIdx = idx
	}
	return s.hostIdx
}
