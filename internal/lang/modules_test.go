package lang

import (
	"strings"
	"testing"
)

// index is a fixed ModuleIndex: module → images.
type index map[string][]string

func (i index) ImagesWithModule(language, module string) []string { return i[language+":"+module] }

const pyTrace = `Traceback (most recent call last):
  File "main.py", line 1, in <module>
    import numpy.linalg
ModuleNotFoundError: No module named 'numpy'
`

const nodeTrace = `node:internal/modules/cjs/loader:1080
  throw err;
  ^

Error: Cannot find module 'lodash/fp'
Require stack:
- /tmp/.corral/main.js
    at Module._resolveFilename (node:internal/modules/cjs/loader:1077:15) {
  code: 'MODULE_NOT_FOUND',
  requireStack: [ '/tmp/.corral/main.js' ]
}

Node.js v18.19.0
`

func TestExplainMissingModule(t *testing.T) {
	py, _ := Get("python")
	js, _ := Get("javascript")
	sh, _ := Get("bash")
	idx := index{"python:numpy": {"full", "python"}, "javascript:lodash": {"node"}, "python:os": {"host", "python"}}
	for _, tc := range []struct {
		name   string
		r      Runner
		image  string
		stderr string
		idx    ModuleIndex
		want   []string
		not    []string
	}{
		{"python elsewhere", py, "host", pyTrace, idx,
			[]string{"No module named 'numpy'", `module "numpy" is not in image "host"`, "images that have it: full, python"}, nil},
		{"python nowhere", py, "python", "ModuleNotFoundError: No module named 'nonexistent_mod'\n", idx,
			[]string{"No module named 'nonexistent_mod'", `"nonexistent_mod" is not in image "python", nor in any other image`}, nil},
		{"python submodule of a present package", py, "python", "ModuleNotFoundError: No module named 'numpy.nope'\n", idx,
			[]string{"No module named 'numpy.nope'"}, []string{"images that have it", "nor in any"}},
		{"python without an index", py, "host", pyTrace, nil,
			[]string{"No module named 'numpy'"}, []string{"image"}},
		{"python other error", py, "host", "ZeroDivisionError: division by zero\n", idx,
			[]string{"ZeroDivisionError"}, []string{"image"}},
		{"node", js, "host", nodeTrace, idx,
			[]string{"Error: Cannot find module 'lodash/fp'", `module "lodash" is not in image "host"; images that have it: node`}, nil},
		{"node relative", js, "node", "Error: Cannot find module './util'\n", idx,
			[]string{"Cannot find module './util'"}, []string{"image"}},
		{"runner without modules", sh, "host", "No module named 'x'\n", idx,
			[]string{"No module named 'x'"}, []string{"image"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(tc.r, tc.image, tc.idx)(tc.stderr)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("%q has %q", got, n)
				}
			}
		})
	}
}

func TestMissingNode(t *testing.T) {
	for in, want := range map[string]string{
		"Cannot find module 'lodash'":           "lodash",
		"Cannot find module '@scope/pkg/sub/x'": "@scope/pkg",
		"Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'axios' imported from /tmp/.corral/main.mjs": "axios",
		"Cannot find module '/abs/x'":    "",
		"Cannot find module 'node:nope'": "",
		"Cannot find module '@scope'":    "",
	} {
		got, _ := missingNode(in)
		if got != want {
			t.Errorf("missingNode(%q) = %q, want %q", in, got, want)
		}
	}
}
