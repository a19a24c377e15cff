package collect

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/corralhq/corral/sandbox"
)

// Summary caps, in characters (runes).
const (
	// DefaultSummaryChars is the cap when the configuration sets none:
	// about a thousand tokens, enough for twenty lines of output or a
	// long traceback.
	DefaultSummaryChars = 4000
	// MinSummaryChars is the smallest cap honoured; smaller caps are
	// raised to it, so that the status, the error, the counts and the next
	// step always fit with some output.
	MinSummaryChars = 1000
)

// SummaryLines is how many lines of stdout a success shows (docs/api.md,
// "Summaries": the first 20 lines of stdout and the artifact names).
const SummaryLines = 20

// Summary is the model-ready account of a final record, built the same way
// every time from the record alone (no model call), at most maxChars
// characters (0: DefaultSummaryChars). It follows docs/api.md's rule:
//
//   - success: the exit code, the first SummaryLines lines of stdout and the
//     artifact names;
//   - either: a "limits hit:" line under the headline when a limit refused
//     the program something (res.LimitsHit), so that a success that met
//     the process or disk limit and went on says so;
//   - failure: the error type and exit code, the error message (unless it is
//     a compile error's, which only repeats stderr), the whole stderr as the
//     record keeps it (head and tail), and the caller's next step for the
//     error type (docs/errors.md's table).
//
// The stream a verdict does not show is counted in one line, so a model
// knows it exists. When the text does not fit, stdout loses its end and
// stderr its middle, each with a marker saying what was cut; the status and
// the next step are always kept. Records that are not final get "".
func Summary(res sandbox.Result, maxChars int) string {
	if !res.Status.Final() {
		return ""
	}
	if maxChars <= 0 {
		maxChars = DefaultSummaryChars
	}
	maxChars = max(maxChars, MinSummaryChars)
	// Lines around the variable-sized body, which gets whatever room they
	// leave.
	var before, after []string
	var body block
	part := maxChars / 4 // the most the message or the artifact list may take

	switch res.Status {
	case sandbox.StatusSuccess:
		before = append(before, "success: "+exitText(res))
		body = stdoutBlock(res)
		if res.StderrBytes > 0 {
			after = append(after, "stderr: "+countText(res.StderrLines, res.StderrBytes)+", not shown")
		}
	default:
		typ := sandbox.ErrorType("unknown")
		msg := ""
		if res.Error != nil {
			typ, msg = res.Error.Type, res.Error.Message
		}
		if res.Status == sandbox.StatusCancelled {
			before = append(before, "cancelled: "+exitText(res))
		} else {
			before = append(before, fmt.Sprintf("failed: %s, %s", typ, exitText(res)))
		}
		if msg != "" && (typ != sandbox.ErrCompile || res.Stderr == "") {
			before = append(before, "error: "+cutEnd(msg, part, "…"))
		}
		body = stderrBlock(res)
		if res.StdoutBytes > 0 {
			after = append(after, "stdout: "+countText(res.StdoutLines, res.StdoutBytes)+", not shown")
		}
	}
	if l := limitsLine(res, part); l != "" {
		// Above the output, and never dropped: on a success it is the one sign
		// that a limit changed what the program did.
		before = append(before, l)
	}
	if l := artifactLine(res, part); l != "" {
		after = append(after, l)
	}
	if n := len(res.ArtifactsSkipped); n > 0 {
		after = append(after, fmt.Sprintf("not collected from /workspace/output: %d (see artifacts_skipped)", n))
	}
	if res.Status != sandbox.StatusSuccess {
		after = append(after, "next step: "+NextStep(res))
	}

	fixed := 0
	for _, l := range append(append([]string(nil), before...), after...) {
		fixed += utf8.RuneCountInString(l) + 1 // and its newline
	}
	lines := append(before, body.render(maxChars-fixed)...)
	lines = append(lines, after...)
	s := strings.Join(lines, "\n")
	if utf8.RuneCountInString(s) > maxChars {
		// A safety net the budget above should make unreachable: keep the
		// first line (the status) and the last (the next step, or the
		// artifacts), cut what is between.
		first, rest, _ := strings.Cut(s, "\n")
		i := strings.LastIndexByte(rest, '\n')
		middle, last := rest[:max(i, 0)], rest[i+1:]
		marker := fmt.Sprintf("[… summary cut at %d characters]", maxChars)
		room := maxChars - utf8.RuneCountInString(first) - utf8.RuneCountInString(last) - utf8.RuneCountInString(marker) - 3
		s = first + "\n" + firstRunes(middle, room) + "\n" + marker + "\n" + last
	}
	return s
}

// NextStep is what the caller should do about a failed record, by error
// type: docs/errors.md's table, with the limit that was in force.
func NextStep(res sandbox.Result) string {
	if res.Error == nil {
		return "look at the record: it failed without an error type"
	}
	switch res.Error.Type {
	case sandbox.ErrCompile:
		return "fix the code and retry; the error above says where it does not compile"
	case sandbox.ErrRuntime:
		return "fix the code and retry, or tell the user if the cause is outside the code (its input, its request)"
	case sandbox.ErrTimeout:
		return "make the code faster, or raise limits.timeout_ms" + was(res.Limits.TimeoutMS) + ", and retry"
	case sandbox.ErrOOM:
		return "raise limits.memory_mb" + was(res.Limits.MemoryMB) + " or make the code use less memory, and retry"
	case sandbox.ErrResourceLimit:
		// The limit behind the verdict, in Verdict's order: processes
		// before the disk.
		switch {
		case hit(res, sandbox.LimitProcesses):
			return "start fewer processes and threads at once, and retry; the process limit is the server's, a request cannot raise it"
		case hit(res, sandbox.LimitDisk):
			return "raise limits.disk_mb" + was(res.Limits.DiskMB) + " or write less, and retry"
		}
		return "raise the limit the error names, and retry"
	case sandbox.ErrInternal:
		return "retry: internal error in Corral, not in the code; the same request may succeed"
	case sandbox.ErrInput:
		return "fix the request or the input file the error names, and submit it again; the code did not run"
	case sandbox.ErrCancelled:
		return "none: a client cancelled it; submit it again if the result is still needed"
	}
	return "look at the error above"
}

// hit reports whether the record lists limit among its limits_hit.
func hit(res sandbox.Result, limit sandbox.Limit) bool {
	for _, h := range res.LimitsHit {
		if h.Limit == limit {
			return true
		}
	}
	return false
}

// limitsLine names the limits that refused the program something, within
// room characters, or "".
func limitsLine(res sandbox.Result, room int) string {
	if len(res.LimitsHit) == 0 {
		return ""
	}
	parts := make([]string, len(res.LimitsHit))
	for i, h := range res.LimitsHit {
		parts[i] = fmt.Sprintf("%s (%s)", h.Limit, h.Detail)
	}
	return cutEnd("limits hit: "+strings.Join(parts, "; "), room, "…")
}

func was(limit int64) string {
	if limit <= 0 {
		return ""
	}
	return fmt.Sprintf(" (it was %d)", limit)
}

func exitText(res sandbox.Result) string {
	if res.ExitCode == nil {
		return "no exit code"
	}
	if res.Signal != "" {
		return fmt.Sprintf("exit code %d (%s)", *res.ExitCode, res.Signal)
	}
	return fmt.Sprintf("exit code %d", *res.ExitCode)
}

func countText(lines, bytes int64) string {
	return fmt.Sprintf("%s, %s", plural(lines, "line"), plural(bytes, "byte"))
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// artifactLine names the artifacts, as many as fit in room characters.
func artifactLine(res sandbox.Result, room int) string {
	if len(res.Artifacts) == 0 {
		if res.Status == sandbox.StatusSuccess {
			return "artifacts: none"
		}
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "artifacts (%d): ", len(res.Artifacts))
	used := utf8.RuneCountInString(b.String())
	for i, a := range res.Artifacts {
		name := a.Path
		if i > 0 {
			name = ", " + name
		}
		need := utf8.RuneCountInString(name)
		if i < len(res.Artifacts)-1 {
			need += len(fmt.Sprintf(", … and %d more", len(res.Artifacts)-i-1)) // room to say what follows
		}
		if used+need > room {
			if i == 0 {
				// Not even one name fits: cut it.
				name = cutEnd(name, max(room-used-len(fmt.Sprintf(", … and %d more", len(res.Artifacts)-1)), 1), "…")
				b.WriteString(name)
				if len(res.Artifacts) > 1 {
					fmt.Fprintf(&b, ", … and %d more", len(res.Artifacts)-1)
				}
				break
			}
			fmt.Fprintf(&b, ", … and %d more", len(res.Artifacts)-i)
			break
		}
		b.WriteString(name)
		used += utf8.RuneCountInString(name)
	}
	return b.String()
}

// block is the variable part of a summary: a title line, lines of output,
// and how to shorten them.
type block struct {
	title string
	text  string // without a final newline; "" for none
	note  string // a line after the text ("" for none)
	// keepHead shortens from the end (stdout: its first lines are the
	// point); otherwise from the middle (stderr: a compiler's first error
	// and an interpreter's last line both matter).
	keepHead bool
	stream   string
}

// render returns the block's lines within room characters (newlines
// included), shortening the text with a marker if it must.
func (b block) render(room int) []string {
	out := []string{b.title}
	if b.text == "" {
		return out
	}
	room -= utf8.RuneCountInString(b.title) + 1
	if b.note != "" {
		room -= utf8.RuneCountInString(b.note) + 1
	}
	text := b.text
	if n := utf8.RuneCountInString(text); n+1 > room {
		marker := fmt.Sprintf("[… %d characters of %s cut here to fit the summary …]", n, b.stream) // longest form
		keep := room - 1 - utf8.RuneCountInString(marker) - 2
		if keep <= 0 {
			text = fmt.Sprintf("[… %s not shown: no room in the summary]", b.stream)
		} else if b.keepHead {
			head := snapHead(text, keep)
			text = head + "\n" + fmt.Sprintf("[… %d characters of %s cut here to fit the summary …]", n-utf8.RuneCountInString(head), b.stream)
		} else {
			head := snapHead(text, keep/2)
			tail := snapTail(text, keep-utf8.RuneCountInString(head))
			cut := n - utf8.RuneCountInString(head) - utf8.RuneCountInString(tail)
			text = head + "\n" + fmt.Sprintf("[… %d characters of %s cut here to fit the summary …]", cut, b.stream) + "\n" + tail
		}
	}
	out = append(out, text)
	if b.note != "" {
		out = append(out, b.note)
	}
	return out
}

// omitted matches the marker Stream.Text puts between head and tail.
var omitted = regexp.MustCompile(`\n\[… \d+ bytes omitted …\]\n`)

// stdoutBlock is the first SummaryLines lines of stdout. Lines after the
// record's head/tail marker are not the first lines, so they are never
// shown.
func stdoutBlock(res sandbox.Result) block {
	b := block{keepHead: true, stream: "stdout"}
	if res.Stdout == "" {
		b.title = "stdout: empty"
		return b
	}
	text := res.Stdout
	if res.StdoutTruncated {
		if loc := omitted.FindStringIndex(text); loc != nil {
			text = text[:loc[0]+1]
		}
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	total := max(res.StdoutLines, int64(len(lines)))
	if len(lines) > SummaryLines {
		lines = lines[:SummaryLines]
	}
	shown := int64(len(lines))
	if shown == total {
		b.title = fmt.Sprintf("stdout (%s):", plural(total, "line"))
	} else {
		b.title = fmt.Sprintf("stdout (first %d of %d lines):", shown, total)
		b.note = fmt.Sprintf("[… %s not shown]", plural(total-shown, "more line"))
	}
	b.text = strings.Join(lines, "\n")
	return b
}

// stderrBlock is stderr as the record keeps it.
func stderrBlock(res sandbox.Result) block {
	b := block{stream: "stderr"}
	if res.Stderr == "" {
		b.title = "stderr: empty"
		return b
	}
	lines := max(res.StderrLines, int64(strings.Count(strings.TrimSuffix(res.Stderr, "\n"), "\n")+1))
	b.title = fmt.Sprintf("stderr (%s):", plural(lines, "line"))
	b.text = strings.TrimSuffix(res.Stderr, "\n")
	return b
}

// cutEnd returns s within n characters: s itself, or its start followed by
// marker.
func cutEnd(s string, n int, marker string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return firstRunes(s, n-utf8.RuneCountInString(marker)) + marker
}

// firstRunes is the first n characters of s.
func firstRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// lastRunes is the last n characters of s.
func lastRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := len(s)
	for ; n > 0 && i > 0; n-- {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
	}
	return s[i:]
}

// snapHead is at most n characters from the start of s, ending at a line
// end when that keeps at least half of them.
func snapHead(s string, n int) string {
	h := firstRunes(s, n)
	if i := strings.LastIndexByte(h, '\n'); i >= 0 && utf8.RuneCountInString(h[:i]) >= n/2 {
		return h[:i]
	}
	return h
}

// snapTail is at most n characters from the end of s, starting at a line
// start when that keeps at least half of them.
func snapTail(s string, n int) string {
	t := lastRunes(s, n)
	if i := strings.IndexByte(t, '\n'); i >= 0 && utf8.RuneCountInString(t[i+1:]) >= n/2 {
		return t[i+1:]
	}
	return t
}
