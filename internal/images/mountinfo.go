package images

import (
	"slices"
	"strconv"
	"strings"
)

// mountsUnder lists the mount points in mountinfo (the text of
// /proc/self/mountinfo, proc(5)) that are dir or lie below it, deepest
// first, so that detaching them in order never leaves a mount hidden under
// another. A point mounted over twice is listed twice: each detach removes
// one.
func mountsUnder(mountinfo []byte, dir string) []string {
	var mounts []string
	for _, line := range strings.Split(string(mountinfo), "\n") {
		// The mount point is the fifth field. Fields are separated by one
		// space, and the kernel escapes only space, tab, newline and
		// backslash in them: a vertical tab or a form feed in a path is
		// written as it is, so splitting on any white space would cut it.
		f := strings.Split(line, " ")
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	slices.SortStableFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	return mounts
}

// unescapeMount undoes mountinfo's octal escapes: \040 (space), \011 (tab),
// \012 (newline) and \134 (backslash). A backslash not followed by three
// octal digits of a byte is kept as it is.
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
