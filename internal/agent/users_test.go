//go:build linux

package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// writeUsers writes root's /etc/passwd and /etc/group.
func writeUsers(t *testing.T, root, passwd, group string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	testPasswd = "root:x:0:0:root:/root:/bin/bash\nbroken:x:nope:1::/x:/bin/sh\n" +
		"user:x:1000:1000:user:/home/user:/bin/bash\nother:x:1001:1001::/home/other:/bin/sh\n"
	testGroup = "root:x:0:\nuser:x:1000:\nwheel:x:10:other,user\nstaff:x:50:other\n"
)

// TestResolveUser: who a request naming a user runs as, for a system
// sandbox's agent (root: it switches) and any other (it runs everything
// as itself). Nothing here switches; users_sandbox_test.go does, as root.
func TestResolveUser(t *testing.T) {
	root := t.TempDir()
	writeUsers(t, root, testPasswd, testGroup)
	system := &Agent{local: true, root: root, uid: 0, users: true}
	for _, c := range []struct {
		user string
		want identity
	}{
		{"", identity{name: "user", uid: 1000, gid: 1000, groups: []int{1000, 10}, home: "/home/user", cred: true, env: true}},
		{"root", identity{name: "root", uid: 0, gid: 0, groups: []int{0}, home: "/root", cred: true, env: true}},
		{"other", identity{name: "other", uid: 1001, gid: 1001, groups: []int{1001, 10, 50}, home: "/home/other", cred: true, env: true}},
	} {
		got, err := system.resolveUser(c.user)
		if err != nil || got.name != c.want.name || got.uid != c.want.uid || got.gid != c.want.gid || !slices.Equal(got.groups, c.want.groups) ||
			got.home != c.want.home || !got.cred || !got.env {
			t.Errorf("system: user %q: %+v, %v; want %+v", c.user, got, err, c.want)
		}
	}
	if _, err := system.resolveUser("ghost"); kindOf(err) != KindInvalid || !strings.Contains(err.Error(), "not in the sandbox's /etc/passwd") {
		t.Errorf("system: an unknown user: %v", err)
	}
	// Without an entry for DefaultUID (or without /etc/passwd), the
	// default user is uid and gid 1000 with E2B's home.
	bare := &Agent{local: true, root: t.TempDir(), uid: 0, users: true}
	if got, err := bare.resolveUser(""); err != nil || got.uid != DefaultUID || got.gid != DefaultUID || got.home != "/home/user" ||
		got.name != "user" || !got.cred {
		t.Errorf("system without /etc/passwd: %+v, %v", got, err)
	}

	// A one-shot sandbox's agent, uid 1000 here: "" is itself, without
	// a word of the environment; its own name is itself with HOME and
	// USER; anyone else is refused.
	oneShot := &Agent{local: true, root: root, uid: 1000}
	if got, err := oneShot.resolveUser(""); err != nil || got.cred || got.env || got.uid != 1000 {
		t.Errorf("one-shot: default: %+v, %v", got, err)
	}
	if got, err := oneShot.resolveUser("user"); err != nil || got.cred || !got.env || got.home != "/home/user" {
		t.Errorf("one-shot: its own user: %+v, %v", got, err)
	}
	for _, u := range []string{"root", "other"} {
		if _, err := oneShot.resolveUser(u); kindOf(err) != KindInvalid || !strings.Contains(err.Error(), "only a live sandbox") {
			t.Errorf("one-shot: user %q: %v", u, err)
		}
	}
	if _, err := oneShot.resolveUser("ghost"); kindOf(err) != KindInvalid {
		t.Errorf("one-shot: an unknown user: %v", err)
	}
}

func TestUserEnv(t *testing.T) {
	id := identity{name: "user", home: "/home/user", env: true}
	got := userEnv([]string{"PATH=/bin", "HOME=/workspace"}, id)
	want := []string{"PATH=/bin", "HOME=/workspace", "USER=user", "LOGNAME=user"}
	if !slices.Equal(got, want) {
		t.Errorf("env %q, want %q", got, want)
	}
	id.env = false
	if got := userEnv([]string{"PATH=/bin"}, id); !slices.Equal(got, []string{"PATH=/bin"}) {
		t.Errorf("env without env: %q", got)
	}
}

// TestLocalOwnUser: an agent that is not a system sandbox's (local mode,
// as whoever runs the test) runs a process as its own user by name, with
// HOME, USER and LOGNAME from /etc/passwd, and refuses another user's
// name, a process or a file operation.
func TestLocalOwnUser(t *testing.T) {
	l, root := startLocal(t)
	uid := os.Getuid()
	writeUsers(t, root, "me:x:"+strconv.Itoa(uid)+":"+strconv.Itoa(os.Getgid())+"::/home/me:/bin/sh\n"+
		"else:x:"+strconv.Itoa(uid+1)+":1::/home/else:/bin/sh\n", "")
	if h, err := l.Ready(t.Context()); err != nil || h.Users || h.UID != uid {
		t.Errorf("hello %+v, %v; want uid %d without users", h, err, uid)
	}
	req := sh(`id -u; echo "$HOME $USER $LOGNAME"`)
	req.User = "me"
	out, st := run(t, l, req)
	if want := strconv.Itoa(uid) + "\n/home/me me me\n"; out.stdout.String() != want || st.Code != 0 {
		t.Errorf("as me: %q (%+v, stderr %q), want %q", out.stdout.String(), st, out.stderr.String(), want)
	}
	// No user named: as before, the environment as given.
	out, _ = run(t, l, sh(`echo "${USER-unset}"`))
	if got := out.stdout.String(); got != "unset\n" {
		t.Errorf("without a user: USER %q", got)
	}
	req.User = "else"
	if _, err := l.Start(t.Context(), req, nil); !errors.Is(err, KindInvalid) {
		t.Errorf("start as another user: %v, want %s", err, KindInvalid)
	}
	if err := l.WriteFile(t.Context(), "/workspace/x", 0o644, strings.NewReader("x"), AsUser("else")); !errors.Is(err, KindInvalid) {
		t.Errorf("write as another user: %v, want %s", err, KindInvalid)
	}
	if err := l.WriteFile(t.Context(), "/workspace/x", 0o644, strings.NewReader("x"), AsUser("me")); err != nil {
		t.Errorf("write as its own user: %v", err)
	}
	// Not a system sandbox: files stay under /workspace and /tmp.
	if err := l.WriteFile(t.Context(), "/etc/x", 0o644, strings.NewReader("x")); !errors.Is(err, KindInvalid) {
		t.Errorf("write to /etc: %v, want %s", err, KindInvalid)
	}
}

func TestIDMap(t *testing.T) {
	host := idMap([]byte("         0          0 4294967295\n"))
	runc := idMap([]byte("         0     100000       1000\n      1000       1000          1\n"))
	narrow := idMap([]byte("0 100000 1\n1000 1000 1\n"))
	for _, c := range []struct {
		gid                  int
		host, runc, narrowOK bool
	}{
		{0, true, true, true}, {10, true, true, false}, {999, true, true, false},
		{1000, true, true, true}, {1001, true, false, false}, {65534, true, false, false},
	} {
		if host(c.gid) != c.host || runc(c.gid) != c.runc || narrow(c.gid) != c.narrowOK {
			t.Errorf("gid %d: %v %v %v, want %v %v %v", c.gid, host(c.gid), runc(c.gid), narrow(c.gid), c.host, c.runc, c.narrowOK)
		}
	}
}
