//go:build linux

package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Users. The agent of a system sandbox (a live sandbox: a machine) runs
// as root, uid 0 of the sandbox, and runs each process and file operation
// as a user of the sandbox's /etc/passwd, the one the request names
// (StartRequest.User, and the user of every file request), by default the
// one of uid DefaultUID. A process gets its user's uid, gid and
// supplementary groups (from /etc/group); a file operation is done with
// them as its thread's file-system credentials (asUser), so what it makes
// is the user's and what the user may not touch it may not either. The
// agent of any other sandbox (a one-shot execution) runs as the sandbox's
// unprivileged uid without capabilities: everything runs as that uid, and
// a request that names another user is refused.

// DefaultUID is the user a system sandbox's agent runs processes and file
// operations as when a request names none (E2B's "user").
const DefaultUID = 1000

// The default user when /etc/passwd has no entry for DefaultUID.
const (
	defaultUserName = "user"
	defaultHome     = "/home/user"
)

// passwdPath and groupPath are the sandbox's user and group databases
// (under the root in local mode).
var (
	passwdPath = "/etc/passwd"
	groupPath  = "/etc/group"
)

// identity is who a process or file operation runs as.
type identity struct {
	name     string
	uid, gid int
	groups   []int
	home     string
	// cred: the agent switches to this identity (it is root); else it is
	// the agent's own.
	cred bool
	// env: HOME, USER and LOGNAME that a process's environment lacks come
	// from the entry (a user was named, or the agent switches).
	env bool
}

// passwdEntry is a line of /etc/passwd.
type passwdEntry struct {
	name     string
	uid, gid int
	home     string
}

// lookupPasswd finds the entry of the user name, or (name "") of uid; ok
// is false when there is none (or no readable database).
func (a *Agent) lookupPasswd(name string, uid int) (passwdEntry, bool) {
	var found passwdEntry
	ok := false
	// name:password:uid:gid:gecos:home:shell
	a.records(passwdPath, 7, func(fs []string) bool {
		u, err1 := strconv.Atoi(fs[2])
		g, err2 := strconv.Atoi(fs[3])
		if err1 != nil || err2 != nil || u < 0 || g < 0 {
			return true
		}
		if (name != "" && fs[0] == name) || (name == "" && u == uid) {
			found, ok = passwdEntry{name: fs[0], uid: u, gid: g, home: fs[5]}, true
			return false
		}
		return true
	})
	return found, ok
}

// records calls fn with the fields of each line of the sandbox's
// colon-separated database at path (/etc/passwd, /etc/group) that has at
// least n of them, until fn returns false. A database that cannot be read
// has none.
func (a *Agent) records(path string, n int, fn func(fields []string) bool) {
	f, err := os.Open(a.hostPath(path))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Split(sc.Text(), ":"); len(fs) >= n && !fn(fs) {
			return
		}
	}
}

// gidMapped reports whether the agent's user namespace maps gid: a group
// it does not map cannot be held (setgroups(2) refuses it), so a member
// of it is not given it. Without a readable map, every gid is.
var gidMapped = sync.OnceValue(func() func(int) bool {
	b, err := os.ReadFile("/proc/self/gid_map")
	if err != nil {
		return func(int) bool { return true }
	}
	return idMap(b)
})

// idMap reads a uid_map or gid_map (user_namespaces(7)) into whether it
// maps an id.
func idMap(b []byte) func(int) bool {
	var ranges [][2]int
	for _, line := range strings.Split(string(b), "\n") {
		// inside outside count
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.Atoi(f[0])
		n, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			ranges = append(ranges, [2]int{in, in + n})
		}
	}
	return func(gid int) bool {
		for _, r := range ranges {
			if gid >= r[0] && gid < r[1] {
				return true
			}
		}
		return false
	}
}

// supplementaryGroups lists the groups of /etc/group that name user as a
// member and the agent's user namespace maps, gid (its primary group)
// first.
func (a *Agent) supplementaryGroups(user string, gid int) []int {
	groups := []int{gid}
	// name:password:gid:member,member
	a.records(groupPath, 4, func(fs []string) bool {
		g, err := strconv.Atoi(fs[2])
		if err == nil && g >= 0 && !slices.Contains(groups, g) && gidMapped()(g) && slices.Contains(strings.Split(fs[3], ","), user) {
			groups = append(groups, g)
		}
		return true
	})
	return groups
}

// resolveUser is who a request naming user runs as.
func (a *Agent) resolveUser(user string) (identity, error) {
	if !a.users {
		if user == "" {
			return identity{uid: a.uid, gid: os.Getgid()}, nil
		}
		e, ok := a.lookupPasswd(user, 0)
		if !ok {
			return identity{}, refuse(KindInvalid, "user %q is not in the sandbox's /etc/passwd", user)
		}
		if e.uid != a.uid {
			return identity{}, refuse(KindInvalid,
				"user %q: only a live sandbox's processes and file operations can run as another user; this sandbox's all run as uid %d", user, a.uid)
		}
		return identity{name: e.name, uid: e.uid, gid: e.gid, home: e.home, env: true}, nil
	}
	e, ok := a.lookupPasswd(user, DefaultUID)
	switch {
	case !ok && user != "":
		return identity{}, refuse(KindInvalid, "user %q is not in the sandbox's /etc/passwd", user)
	case !ok:
		e = passwdEntry{name: defaultUserName, uid: DefaultUID, gid: DefaultUID, home: defaultHome}
	}
	return identity{name: e.name, uid: e.uid, gid: e.gid, home: e.home, groups: a.supplementaryGroups(e.name, e.gid),
		cred: true, env: true}, nil
}

// userEnv adds to env the HOME, USER and LOGNAME it lacks, from id's entry
// when id says so.
func userEnv(env []string, id identity) []string {
	if !id.env {
		return env
	}
	for _, kv := range [][2]string{{"HOME", id.home}, {"USER", id.name}, {"LOGNAME", id.name}} {
		if !slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, kv[0]+"=") }) {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// credential is what a process started as id runs with: nil, the agent's
// own, unless the agent switches.
func (id identity) credential() *syscall.Credential {
	if !id.cred {
		return nil
	}
	groups := make([]uint32, len(id.groups))
	for i, g := range id.groups {
		groups[i] = uint32(g)
	}
	return &syscall.Credential{Uid: uint32(id.uid), Gid: uint32(id.gid), Groups: groups}
}

// asUser runs op with id's file-system credentials, when the agent
// switches to it; else op runs as the agent. The credentials are the
// thread's own: op runs on a goroutine locked to a thread whose fsuid,
// fsgid and groups are set by raw system calls, which change the calling
// thread only (syscall.Setgroups and friends change every thread of the
// process), and restored after. A thread that cannot be restored is never
// unlocked: it ends with its goroutine, and no other goroutine runs on it
// with the user's credentials.
func asUser[T any](id identity, op func() (T, error)) (T, error) {
	return asUserBy(id, false, op)
}

// asUserBy is asUser; effective: switch the effective ids, as where there
// is no setfsuid (for tests of that way on a kernel that has it).
func asUserBy[T any](id identity, effective bool, op func() (T, error)) (T, error) {
	if !id.cred {
		return op()
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		restore, err := switchFS(id, effective)
		var r result
		if err == nil {
			r.v, r.err = op()
		} else {
			r.err = err
		}
		if restore() != nil {
			done <- r // the thread stays locked and dies with the goroutine
			return
		}
		goruntime.UnlockOSThread()
		done <- r
	}()
	r := <-done
	return r.v, r.err
}

// noSetfsuid: setfsgid answered ENOSYS once (gVisor); it is not asked
// again (gVisor reports each unsupported call).
var noSetfsuid atomic.Bool

// switchFS gives the calling thread id's file-system credentials and
// returns what restores the thread's own (to be called in every case).
// Where there is no setfsuid (gVisor answers ENOSYS), or with effective,
// it switches the thread's effective ids, which the file-system ones
// follow: the real and saved uid stay 0, so the thread can switch back.
func switchFS(id identity, effective bool) (restore func() error, err error) {
	groups, err := unix.Getgroups() // the thread's own, by a raw system call
	if err != nil {
		return func() error { return nil }, fmt.Errorf("getgroups: %w", err)
	}
	egid := unix.Getegid()
	effective = effective || noSetfsuid.Load()
	restore = func() error {
		var errs []error
		if effective {
			errs = append(errs, setres(unix.SYS_SETRESUID, 0), setres(unix.SYS_SETRESGID, egid))
		} else {
			errs = append(errs, setfs(unix.SYS_SETFSUID, 0), setfs(unix.SYS_SETFSGID, egid))
		}
		errs = append(errs, setThreadGroups(groups))
		return errors.Join(errs...)
	}
	if err := setThreadGroups(id.groups); err != nil {
		return restore, err
	}
	if !effective {
		err := setfs(unix.SYS_SETFSGID, id.gid)
		if !errors.Is(err, unix.ENOSYS) {
			if err != nil {
				return restore, err
			}
			return restore, setfs(unix.SYS_SETFSUID, id.uid)
		}
		noSetfsuid.Store(true)
		effective = true
	}
	if err := setres(unix.SYS_SETRESGID, id.gid); err != nil {
		return restore, err
	}
	return restore, setres(unix.SYS_SETRESUID, id.uid)
}

// setfs sets the calling thread's fsuid or fsgid (trap SYS_SETFSUID or
// SYS_SETFSGID) to v. The call answers the previous value, never an
// error, so it is asked again with an invalid id, which changes nothing.
func setfs(trap uintptr, v int) error {
	if _, _, e := unix.RawSyscall(trap, uintptr(v), 0, 0); e != 0 {
		return fmt.Errorf("setfs%s %d: %w", fsName(trap), v, e)
	}
	cur, _, _ := unix.RawSyscall(trap, ^uintptr(0), 0, 0)
	if int(uint32(cur)) != v {
		return fmt.Errorf("setfs%s %d: %w", fsName(trap), v, unix.EPERM)
	}
	return nil
}

func fsName(trap uintptr) string {
	if trap == unix.SYS_SETFSUID {
		return "uid"
	}
	return "gid"
}

// setres sets the calling thread's effective uid or gid (trap
// SYS_SETRESUID or SYS_SETRESGID) to v, leaving the real and saved ones.
func setres(trap uintptr, v int) error {
	keep := ^uintptr(0)
	if _, _, e := unix.RawSyscall(trap, keep, uintptr(v), keep); e != 0 {
		return fmt.Errorf("setres(%d) effective %d: %w", trap, v, e)
	}
	return nil
}

// setThreadGroups sets the calling thread's supplementary groups.
func setThreadGroups(groups []int) error {
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var p unsafe.Pointer
	if len(gs) > 0 {
		p = unsafe.Pointer(&gs[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	goruntime.KeepAlive(gs)
	return nil
}

// asUserDo is asUser for an op without a result.
func asUserDo(id identity, op func() error) error {
	_, err := asUser(id, func() (struct{}, error) { return struct{}{}, op() })
	return err
}
