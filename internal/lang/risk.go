package lang

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Risk is a construct in a program that makes the strong tier the better
// place to run it: starting processes, loading native code, raw system
// calls, sockets, or code that hides what it runs.
type Risk struct {
	// Construct names what was found as a reader of the code would say
	// it: "subprocess", "os.system", "background job (&)".
	Construct string
	// Line is where it first appears, counting from 1.
	Line int
}

func (r Risk) String() string { return fmt.Sprintf("%s (line %d)", r.Construct, r.Line) }

// RiskScanner is a Runner that can point at risky constructs in code.
//
// The scan is a routing hint and never a defence: it sends code that looks
// risky to the gVisor tier, and code it misses still runs inside the full
// sandbox policy. Scanners therefore prefer false positives (a comment
// that mentions subprocess routes to gVisor) over being clever, and do not
// strip comments or strings, where a wrong guess would hide code. Risks
// must be safe on any input and take time linear in its size.
type RiskScanner interface {
	// Risks returns each distinct construct once, at its first line, in
	// line order.
	Risks(code string) []Risk
}

// riskRule finds one kind of construct. Construct is a regexp.Expand
// template over the match, so "$1" names the matched module or call.
type riskRule struct {
	construct string
	re        *regexp.Regexp
	// needles are literals of which any match contains one; a text with
	// none of them is not searched (Go's regexp reads tens of MB/s, far
	// slower than strings.Contains).
	needles []string
	// keep, if set, vetoes a match given its submatches (which Go's
	// regexp, lacking lookarounds, cannot express).
	keep func(m []string) bool
}

// rule returns a rule; every match of re must contain one of needles.
func rule(construct, re string, needles ...string) riskRule {
	if len(needles) == 0 {
		panic("lang: a risk rule needs needles: " + re)
	}
	return riskRule{construct: construct, re: regexp.MustCompile(re), needles: needles}
}

// alternatives splits a regexp alternation of literal names ("a|b\.c")
// into needles.
func alternatives(alt string) []string {
	return strings.Split(strings.ReplaceAll(alt, `\`, ""), "|")
}

// mayMatch reports whether text holds one of the rule's needles.
func (r riskRule) mayMatch(text string) bool {
	for _, n := range r.needles {
		if strings.Contains(text, n) {
			return true
		}
	}
	return false
}

// source is code as a scanner sees it, possibly normalised (line
// continuations joined, quotes removed), with a map back to the original
// for line numbers.
type source struct {
	text string
	// origin[i] is the offset in the original code of text[i]; nil means
	// text is the original.
	origin []int
	orig   string
}

func raw(code string) source { return source{text: code, orig: code} }

// normalise returns code without the bytes drop reports true for, at
// offset i of code (drop may look ahead; it returns how many bytes to
// drop, 0 to keep code[i]).
func normalise(code string, drop func(code string, i int) int) source {
	var b strings.Builder
	origin := make([]int, 0, len(code))
	for i := 0; i < len(code); {
		if n := drop(code, i); n > 0 {
			i += n
			continue
		}
		b.WriteByte(code[i])
		origin = append(origin, i)
		i++
	}
	return source{text: b.String(), origin: origin, orig: code}
}

// spliced joins backslash-newline continuations, which C, Python and bash
// all read as nothing, so "sys\<newline>tem" is seen as "system".
func spliced(code string) source {
	return normalise(code, func(s string, i int) int {
		if s[i] == '\\' && i+1 < len(s) && s[i+1] == '\n' {
			return 2
		}
		if s[i] == '\\' && i+2 < len(s) && s[i+1] == '\r' && s[i+2] == '\n' {
			return 3
		}
		return 0
	})
}

// line returns the 1-based line in the original code of offset off of text.
func (s source) line(off int) int {
	if s.origin != nil {
		if off < len(s.origin) {
			off = s.origin[off]
		} else {
			off = len(s.orig)
		}
	}
	return strings.Count(s.orig[:off], "\n") + 1
}

// scan applies rules to src and returns each construct once, at its first
// line, in line order.
func scan(src source, rules ...[]riskRule) []Risk {
	first := map[string]int{}
	for _, rs := range rules {
		for _, r := range rs {
			if !r.mayMatch(src.text) {
				continue
			}
			for _, loc := range r.re.FindAllStringSubmatchIndex(src.text, -1) {
				if r.keep != nil {
					m := make([]string, len(loc)/2)
					for i := range m {
						if loc[2*i] >= 0 {
							m[i] = src.text[loc[2*i]:loc[2*i+1]]
						}
					}
					if !r.keep(m) {
						continue
					}
				}
				name := string(r.re.ExpandString(nil, r.construct, src.text, loc))
				// The construct is where its first group is: context
				// before it (a newline, say) is not.
				at := loc[0]
				if len(loc) > 2 && loc[2] >= 0 {
					at = loc[2]
				}
				if off, seen := first[name]; !seen || at < off {
					first[name] = at
				}
			}
		}
	}
	out := make([]Risk, 0, len(first))
	for name, off := range first {
		out = append(out, Risk{Construct: name, Line: src.line(off)})
	}
	sortRisks(out)
	return out
}

// merge combines two scans' results, keeping each construct's first line.
func merge(a, b []Risk) []Risk {
	out := append([]Risk(nil), a...)
	for _, r := range b {
		dup := false
		for i, o := range out {
			if o.Construct == r.Construct {
				out[i].Line = min(o.Line, r.Line)
				dup = true
			}
		}
		if !dup {
			out = append(out, r)
		}
	}
	sortRisks(out)
	return out
}

// sortRisks orders risks by line, then name.
func sortRisks(rs []Risk) {
	slices.SortFunc(rs, func(a, b Risk) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Construct, b.Construct)
	})
}

// kernelRisks are paths to kernel interfaces and escape tricks, risky in
// any language: host memory and logs, kernel tunables, the cgroup
// release_agent, and executable memory for shellcode.
var kernelRisks = []riskRule{
	rule("$1", `(/proc/(?:self|thread-self|\d+)/(?:mem|environ|root|ns|fd/\d)|/proc/(?:sysrq-trigger|sys/|kcore|keys|kallsyms|kmsg|timer_list|sched_debug)|/sys/(?:fs/cgroup|kernel|firmware|module)|/dev/(?:mem|kmem|port|kmsg|vsock|fuse|net/tun|loop|sd[a-z]|vd[a-z]|nvme))`,
		"/proc/", "/sys/", "/dev/"),
	rule("$1", `\b(`+kernelWords+`)\b`, alternatives(kernelWords)...),
}

const kernelWords = `release_agent|notify_on_release|core_pattern|PROT_EXEC`
