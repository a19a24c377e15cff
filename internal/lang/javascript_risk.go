package lang

import "regexp"

// jsModules start processes, threads or other isolates, open sockets,
// resolve names, load native code or reach V8 and the module loader.
const jsModules = `child_process|net|dgram|worker_threads|cluster|vm|http|https|http2|tls|dns|inspector|wasi|v8|module|repl|` +
	`ffi-napi|ffi|node-pty|node-gyp-build|bindings`

var jsRisks = []riskRule{
	// require('x'), import ... from "x", import("x"), require(`node:x`).
	rule("$1", "['\"`](?:node:)?("+jsModules+")['\"`]", alternatives(jsModules)...),
	{construct: "require of a computed name", re: regexp.MustCompile(`\brequire[ \t]*\(([^)]*)\)?`),
		needles: []string{"require"}, keep: computedModule},
	rule("require used as a value", `[=,(:?|&][ \t]*require\b[ \t]*(?:[;,)\n]|$)`, "require"),
	rule("$1", `\b(createRequire|_load|_resolveFilename|mainModule|_linkedBinding|dlopen|constructor[ \t]*\.[ \t]*constructor|Reflect[ \t]*\.[ \t]*(?:get|apply|construct))\b`,
		"createRequire", "_load", "_resolveFilename", "mainModule", "_linkedBinding", "dlopen", "constructor", "Reflect"),
	rule("process.$1", `\bprocess[ \t]*\.[ \t]*(binding|_linkedBinding|dlopen|mainModule|_getActiveHandles|reallyExit|setuid|setgid)\b`, "process"),
	rule("process[…]", `\bprocess[ \t]*\[`, "process"),
	rule("$1[…]", `\b(globalThis|global|module|require)[ \t]*\[`, "global", "module", "require"),
	// Code built at run time.
	rule("$1", `(?:^|[^\w.$])(eval|Function)[ \t]*\(`, "eval", "Function"),
	rule("dynamic import()", `(?:^|[^\w.$])import[ \t]*\(`, "import"),
	rule("Function constructor", "\\.[ \t]*constructor[ \t]*\\(|\\[[ \t]*['\"`]constructor['\"`][ \t]*\\]", "constructor"),
	rule("$1 with a string", "\\b(setTimeout|setInterval|setImmediate)[ \t]*\\([ \t]*['\"`]", "setTimeout", "setInterval", "setImmediate"),
	// Network without a module.
	rule("$1", `\b(fetch|WebSocket|EventSource|XMLHttpRequest)[ \t]*\(`, "fetch", "WebSocket", "EventSource", "XMLHttpRequest"),
}

// computedModule reports whether require's argument is anything but one
// plain string literal ('child_' + 'process', a variable, a template with
// substitutions).
func computedModule(m []string) bool { return !jsPlainLiteral.MatchString(m[1]) }

var jsPlainLiteral = regexp.MustCompile("^[ \t]*(?:'[^'`\"+]*'|\"[^'`\"+]*\"|`[^'`\"+$]*`)[ \t]*$")

// Risks finds process starts, sockets, workers, the module loader's and
// V8's internals, and dynamic code. See RiskScanner.
func (javascript) Risks(code string) []Risk {
	return scan(raw(code), jsRisks, kernelRisks)
}

var _ RiskScanner = javascript{}
