package oci

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/runtime"
)

// A system sandbox (runtime.Spec.System: a live sandbox) is a machine its
// programs may treat as their own:
//
//   - its root file system is writable: an overlay whose lower layer is the
//     image, shared and never written, and whose upper layer is on the
//     sandbox's own disk, so what it installs counts against its disk
//     limit, goes with it, and is kept by pause and resume;
//   - it has users: the agent runs as root inside, with the capabilities a
//     container's root has by default (systemCaps), and starts programs as
//     the unprivileged user (uid Config.UID, named "user", home /home/user)
//     unless asked for another;
//   - on runc, root inside is not root outside: the sandbox has a user
//     namespace in which root is host uid RootHostID (idMappings), so root
//     owns nothing outside its sandbox and its capabilities reach only what
//     the namespace owns. The image, owned by host root, is seen through an
//     idmapped mount (the same mapping), so root inside owns the image's
//     files and can change them, by copy-up into its own layer. On gVisor,
//     root inside is root of gVisor's kernel, which runs as an unprivileged
//     user on the host; the image is seen as it is.
//
// One-shot executions keep a read-only root, no user namespace and an agent
// without capabilities.

// RootHostID is the host uid and gid of root inside a runc system sandbox;
// the ids above it, up to RootHostID+idRange, are its other users' (but the
// sandbox user's, which is the same inside and out, so its files on a disk
// are the same files in any sandbox).
const RootHostID = 100000

// idRange is how many ids a system sandbox's user namespace maps.
const idRange = 65536

// systemUpper is where a system sandbox's writable layer lives on its disk.
const systemUpper = ".system"

// systemCaps are the capabilities of root in a system sandbox: enough to
// own and install files and run services as other users; not those that
// administer the machine (no SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE,
// MKNOD, NET_RAW). Programs that run as another user have none.
var systemCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
}

// idMappings maps root inside to RootHostID, user to itself, and every
// other id below idRange above RootHostID.
func idMappings(user uint32) []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: RootHostID, Size: user},
		{ContainerID: user, HostID: user, Size: 1},
		{ContainerID: user + 1, HostID: RootHostID + user + 1, Size: idRange - user - 1},
	}
}

// systemRoot mounts the sandbox's writable root and returns its host path.
func (s *Sandbox) systemRoot(image string) (string, error) {
	base := filepath.Join(s.disk.Dir, systemUpper)
	upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("create system layer: %w", err)
		}
	}
	owner := s.rootOwner()
	lower := image
	if s.rt.cfg.Tier != runtime.TierGVisor {
		if err := s.rt.reachable(); err != nil {
			return "", err
		}
		lower = filepath.Join(s.dir, "lower")
		if err := s.rt.idmapped(image, lower); err != nil {
			return "", err
		}
	}
	if err := seedUpper(image, upper, owner, int(s.rt.cfg.UID), int(s.rt.cfg.GID)); err != nil {
		return "", fmt.Errorf("create system layer: %w", err)
	}
	target := filepath.Join(s.dir, "rootfs")
	if err := os.Mkdir(target, 0o755); err != nil {
		return "", fmt.Errorf("create system root: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off,redirect_dir=off", lower, upper, work)
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount system root of %s: %w", image, err)
	}
	return target, nil
}

// seedUpper gives a new writable layer the sandbox's users: /etc/passwd and
// /etc/group naming uid as "user" with home /home/user, that home, and
// root's. A layer seeded before (a sandbox resumed, or whose root changed
// them) is left as it is. owner is root inside, as the host sees it.
func seedUpper(lower, upper string, owner, uid, gid int) error {
	if fi, err := os.Stat(upper); err == nil && fi.Sys().(*syscall.Stat_t).Uid == uint32(owner) {
		if _, err := os.Lstat(filepath.Join(upper, "home", "user")); err == nil {
			return nil
		}
	}
	dirs := []struct {
		path     string
		uid, gid int
		mode     os.FileMode
	}{
		{"", owner, owner, 0o755},
		{"etc", owner, owner, 0o755},
		{"home", owner, owner, 0o755},
		{"home/user", uid, gid, 0o755},
		{"root", owner, owner, 0o700},
	}
	for _, d := range dirs {
		p := filepath.Join(upper, d.path)
		if d.path != "" {
			if fi, err := os.Lstat(filepath.Join(lower, d.path)); err == nil && !fi.IsDir() {
				return fmt.Errorf("the image's /%s is not a directory", d.path)
			}
			if err := os.Mkdir(p, d.mode); err != nil && !os.IsExist(err) {
				return err
			}
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
		if err := os.Lchown(p, d.uid, d.gid); err != nil {
			return err
		}
	}
	passwd, err := withUser(filepath.Join(lower, "etc", "passwd"), uid, fmt.Sprintf("user:x:%d:%d:user:/home/user:/bin/bash", uid, gid))
	if err != nil {
		return err
	}
	group, err := withUser(filepath.Join(lower, "etc", "group"), gid, fmt.Sprintf("user:x:%d:", gid))
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{"passwd": passwd, "group": group} {
		p := filepath.Join(upper, "etc", name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
		if err := os.Lchown(p, owner, owner); err != nil {
			return err
		}
	}
	return nil
}

// withUser returns the passwd or group file at path with the entry of id
// replaced by entry (or entry added), and no other entry named "user".
func withUser(path string, id int, entry string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Split(line, ":")
		if len(f) >= 3 && (f[2] == strconv.Itoa(id) || f[0] == "user") {
			continue
		}
		out.WriteString(line + "\n")
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	out.WriteString(entry + "\n")
	return out.Bytes(), nil
}

// idmapped mounts image at target as a runc system sandbox's user
// namespace sees it: read-only, host ids shifted by idMappings.
func (r *Runtime) idmapped(image, target string) error {
	ns, err := r.userns()
	if err != nil {
		return err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, image, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("idmap %s: open_tree: %w", image, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("idmap %s: %w", image, err)
	}
	if err := os.Mkdir(target, 0o755); err != nil {
		return fmt.Errorf("idmap %s: %w", image, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmap %s: move_mount: %w", image, err)
	}
	return nil
}

// userns returns a user namespace with idMappings, made once: the idmapped
// mounts name it. A namespace cannot be made by a threaded process itself,
// so a child that waits is made in one and its namespace kept open.
func (r *Runtime) userns() (*os.File, error) {
	r.usernsOnce.Do(func() {
		r.usernsFile, r.usernsErr = newUserns(idMappings(r.cfg.UID), idMappings(r.cfg.GID))
	})
	return r.usernsFile, r.usernsErr
}

func newUserns(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	conv := func(m []specs.LinuxIDMapping) []syscall.SysProcIDMap {
		out := make([]syscall.SysProcIDMap, len(m))
		for i, x := range m {
			out[i] = syscall.SysProcIDMap{ContainerID: int(x.ContainerID), HostID: int(x.HostID), Size: int(x.Size)}
		}
		return out
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	// The child never runs: it is stopped by ptrace at its exec, long
	// enough to open its namespace, then killed.
	cmd := exec.Command(self)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: conv(uids),
		GidMappings: conv(gids), Ptrace: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	return f, nil
}

// reachable is CheckReachable of the data directory, once.
func (r *Runtime) reachable() error {
	r.reachOnce.Do(func() { r.reachErr = CheckReachable(r.cfg.DataDir) })
	return r.reachErr
}

// CheckReachable reports whether root of a runc system sandbox, an
// unprivileged host user, can pass through the directories above dataDir
// to reach its root file system (New makes those below it so): an error
// names the first that others may not search.
func CheckReachable(dataDir string) error {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			err = fmt.Errorf("%s is mode %o", d, fi.Mode().Perm())
		}
		if err != nil {
			return fmt.Errorf("a live sandbox on runc needs every directory above data_dir %s searchable by others (o+x): %w", dataDir, err)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// Searchable lets every user pass through directory dir (but not list it).
func Searchable(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("make %s searchable: %w", dir, err)
	}
	if m := fi.Mode().Perm(); m&0o011 != 0o011 {
		if err := os.Chmod(dir, m|0o011); err != nil {
			return fmt.Errorf("make %s searchable: %w", dir, err)
		}
	}
	return nil
}

// rootOwner is root inside a system sandbox as the host sees it.
func (s *Sandbox) rootOwner() int {
	if s.rt.cfg.Tier == runtime.TierGVisor {
		return 0
	}
	return RootHostID
}
