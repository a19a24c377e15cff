package images

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// escapeMount escapes a path as the kernel does in mountinfo.
func escapeMount(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func TestUnescapeMount(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"/proc", "/proc"},
		{`/data\040dir`, "/data dir"},
		{`/a\011b\012c`, "/a\tb\nc"},
		{`/back\134slash`, `/back\slash`},
		// An escaped backslash followed by digits is a backslash and the
		// digits: one pass, no second reading.
		{`/x\134040`, `/x\040`},
		{`/end\040`, "/end "},
		// Not an escape: kept as written.
		{`/short\04`, `/short\04`},
		{`/short\0`, `/short\0`},
		{`/trailing\`, `/trailing\`},
		{`/notoctal\089`, `/notoctal\089`},
		{`/toobig\400`, `/toobig\400`},
		{`/sign\+12`, `/sign\+12`},
	} {
		if got := unescapeMount(tc.in); got != tc.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// mountinfoLine is a line of /proc/self/mountinfo with mount point mp.
func mountinfoLine(id int, mp string) string {
	return fmt.Sprintf("%d 30 0:%d / %s rw,nosuid,nodev,noexec,relatime shared:%d - proc proc rw", id, id, escapeMount(mp), id)
}

func TestMountsUnder(t *testing.T) {
	const stage = "/var/lib/corral/images/tmp/stage-1"
	spaced := "/srv/my images/tmp/stage-2"
	info := strings.Join([]string{
		"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
		mountinfoLine(40, stage+"/rootfs/proc"),
		mountinfoLine(41, stage+"/rootfs/dev"),
		mountinfoLine(42, stage+"/rootfs/dev/pts"),
		mountinfoLine(43, stage+"0/rootfs/proc"), // stage-10: another stage
		mountinfoLine(44, "/var/lib/corral/images/tmp/stage"),
		mountinfoLine(45, spaced+"/rootfs/sys"),
		mountinfoLine(46, spaced+"/rootfs/dev/shm\tx"),
		mountinfoLine(47, stage),
		// Only space, tab, newline and backslash are escaped.
		mountinfoLine(49, "/srv/v\vf\fr\r\u00a0/tmp/stage-4/rootfs/proc"),
		mountinfoLine(48, stage+"/rootfs/proc"), // mounted over again
		"",
		"garbage",
		"1 2 3 4",
	}, "\n") + "\n"
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{stage, []string{stage + "/rootfs/dev/pts", stage + "/rootfs/proc", stage + "/rootfs/proc", stage + "/rootfs/dev", stage}},
		{spaced, []string{spaced + "/rootfs/dev/shm\tx", spaced + "/rootfs/sys"}},
		{"/srv/v\vf\fr\r\u00a0/tmp/stage-4", []string{"/srv/v\vf\fr\r\u00a0/tmp/stage-4/rootfs/proc"}},
		{"/var/lib/corral/images/tmp/stage-3", nil},
	} {
		if diff := cmp.Diff(tc.want, mountsUnder([]byte(info), tc.dir)); diff != "" {
			t.Errorf("mountsUnder(%q) (-want +got):\n%s", tc.dir, diff)
		}
	}
	if got := mountsUnder(nil, stage); got != nil {
		t.Errorf("mountsUnder of nothing = %q", got)
	}
}

// FuzzUnescapeMount checks that whatever path the kernel escapes reads back
// as itself, and is found under its own directory.
func FuzzUnescapeMount(f *testing.F) {
	for _, s := range []string{"/proc", "/data dir", "/a\tb\nc", `/back\slash`, `/x\040`, `/x\134`, "\v\f\r\u0085", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		esc := escapeMount(p)
		if got := unescapeMount(esc); got != p {
			t.Fatalf("unescapeMount(%q) = %q, want %q", esc, got, p)
		}
		if p == "" {
			return
		}
		dir := "/stage " + p
		got := mountsUnder([]byte(mountinfoLine(1, dir+"/rootfs")+"\n"), dir)
		if len(got) != 1 || got[0] != dir+"/rootfs" {
			t.Fatalf("mountsUnder(%q) = %q", dir, got)
		}
	})
}
