package lang

import (
	"regexp"
	"strings"

	"github.com/corralhq/corral/internal/collect"
)

// nodeWrapper checks the code's syntax with the CommonJS wrapper's
// parameters (so a top-level return is legal, as in a file), reports a syntax
// error as a compile error, then runs the file as the main module exactly as
// `node file` would.
const nodeWrapper = `const fs = require('fs'), vm = require('vm'), Module = require('module');
const file = process.argv[1];
const src = fs.readFileSync(file, 'utf8');
try {
  vm.compileFunction(src, ['exports', 'require', 'module', '__filename', '__dirname'], { filename: file });
} catch (e) {
  if (e instanceof SyntaxError) {
    // The position and the message, without the wrapper's stack frames.
    const lines = String(e.stack || e).split('\n');
    const at = lines.findIndex((l) => l.startsWith('    at '));
    process.stderr.write(lines.slice(0, at < 0 ? lines.length : at).join('\n') + '\n');
    fs.writeSync(3, 'compile_error');
    process.exit(1);
  }
  throw e;
}
fs.closeSync(3);
Module.runMain();
`

type javascript struct{}

func (javascript) Name() string { return "javascript" }

func (javascript) Plan(code string) Plan {
	file := CodeDir + "/main.js"
	return Plan{
		Files: []File{{Path: file, Content: []byte(code), Mode: 0o644}},
		Run: Step{
			Argv:     []string{"node", "-e", nodeWrapper, file},
			StatusFD: true,
		},
	}
}

func init() { Register(javascript{}, "js", "node", "nodejs") }

// Explain finds the thrown error's "Name: message" line in node's report,
// which puts it above the stack and a version banner.
func (javascript) Explain(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if nodeErrorLine.MatchString(line) {
			return strings.TrimSpace(line)
		}
	}
	var keep []string
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(line, "Node.js v") && !strings.HasPrefix(strings.TrimSpace(line), "at ") {
			keep = append(keep, line)
		}
	}
	return collect.LastLine(strings.Join(keep, "\n"))
}

var nodeErrorLine = regexp.MustCompile(`^(Uncaught )?([A-Z][A-Za-z0-9_$]*)?(Error|Exception)(\s*\[[A-Z_0-9]+\])?: `)

// MissingModule reports the package node could not find.
func (javascript) MissingModule(stderr string) (string, bool) { return missingNode(stderr) }
