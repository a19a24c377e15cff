package images

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// applyLayout turns a root filesystem from mmdebstrap or an archive into a
// Corral image: the runtime's mount points and the agent's mount target, a
// synthetic /etc/passwd and /etc/group entry for the sandbox user (other
// entries kept), Corral's hosts, hostname and resolv.conf, and a tree that
// is read-only to the sandbox user: nothing owned by uid or gid, nothing
// writable by others, no setuid or setgid bit, no file capability, no
// device node.
func applyLayout(dir string, uid, gid int) error {
	r, err := openRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Mkdir("", 0o755, 0, 0); err != nil {
		return err
	}
	// Mount points are empty directories: the runtime mounts over them.
	for _, m := range mountPoints {
		if err := r.RemoveAll(m); err != nil {
			return fmt.Errorf("clear /%s: %w", m, err)
		}
		if err := r.Mkdir(m, 0o755, 0, 0); err != nil {
			return fmt.Errorf("create mount point /%s: %w", m, err)
		}
	}
	if err := r.WriteFile(".corral/agent", nil, 0o755, 0, 0); err != nil {
		return fmt.Errorf("create agent mount point: %w", err)
	}
	if err := layoutEtc(r, uid, gid); err != nil {
		return err
	}
	return restrict(dir, uid, gid)
}

// layoutEtc writes the sandbox user's entries and Corral's network files.
func layoutEtc(r *root, uid, gid int) error {
	if st, err := r.Lstat("etc"); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// A missing /etc, or a link standing for one: a real directory.
		if err := r.RemoveAll("etc"); err != nil {
			return err
		}
	}
	if err := r.Mkdir("etc", 0o755, 0, 0); err != nil {
		return err
	}
	shell := "/bin/sh"
	if _, err := r.Lstat("bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	passwd := keepLines(r, "etc/passwd", func(f []string) bool {
		return len(f) >= 4 && f[0] != "sandbox" && f[2] != strconv.Itoa(uid)
	})
	if !hasEntry(passwd, "root") {
		passwd = append([]string{"root:x:0:0:root:/root:/usr/sbin/nologin"}, passwd...)
	}
	passwd = append(passwd, fmt.Sprintf("sandbox:x:%d:%d:sandbox:/workspace:%s", uid, gid, shell))
	group := keepLines(r, "etc/group", func(f []string) bool {
		return len(f) >= 3 && f[0] != "sandbox" && f[2] != strconv.Itoa(gid)
	})
	if !hasEntry(group, "root") {
		group = append([]string{"root:x:0:"}, group...)
	}
	group = append(group, fmt.Sprintf("sandbox:x:%d:", gid))
	files := map[string]string{
		"passwd": strings.Join(passwd, "\n") + "\n",
		"group":  strings.Join(group, "\n") + "\n",
	}
	etc := hostEtc(uid, gid)
	for _, name := range []string{"hosts", "hostname", "resolv.conf"} {
		files[name] = etc[name]
	}
	if _, err := r.Lstat("etc/nsswitch.conf"); err != nil {
		files["nsswitch.conf"] = etc["nsswitch.conf"]
	}
	for name, content := range files {
		if err := r.WriteFile("etc/"+name, []byte(content), 0o644, 0, 0); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
	}
	// The shadow files hold nothing a sandbox needs.
	for _, name := range []string{"shadow", "gshadow", "shadow-", "gshadow-"} {
		if err := r.RemoveAll("etc/" + name); err != nil {
			return err
		}
	}
	return nil
}

// keepLines reads a colon-separated database from the image (never through a
// link that leaves it) and keeps the entries keep accepts.
func keepLines(r *root, p string, keep func([]string) bool) []string {
	b, err := r.ReadFile(p, 4<<20)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if keep(strings.Split(line, ":")) {
			out = append(out, line)
		}
	}
	return out
}

func hasEntry(lines []string, name string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, name+":") })
}

// restrict walks the tree (never following links) and makes it read-only
// to the sandbox user.
func restrict(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		mode := info.Mode()
		switch {
		case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0:
			return os.Remove(p)
		case int(st.Uid) == uid || int(st.Gid) == gid:
			nu, ng := int(st.Uid), int(st.Gid)
			if nu == uid {
				nu = 0
			}
			if ng == gid {
				ng = 0
			}
			if err := os.Lchown(p, nu, ng); err != nil {
				return err
			}
		}
		if mode&fs.ModeSymlink != 0 {
			return nil
		}
		perm := st.Mode & 0o7777
		strict := perm &^ (unix.S_ISUID | unix.S_ISGID | 0o002)
		if strict != perm || int(st.Uid) == uid || int(st.Gid) == gid {
			// chown clears setuid bits itself; chmod settles the rest.
			if err := unix.Chmod(p, strict); err != nil {
				return &os.PathError{Op: "chmod", Path: p, Err: err}
			}
		}
		if mode.IsRegular() {
			if err := unix.Lremovexattr(p, "security.capability"); err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.ENOTSUP) {
				return &os.PathError{Op: "removexattr", Path: p, Err: err}
			}
		}
		return nil
	})
}

// treeDigest identifies a root filesystem by content: a SHA-256 over every
// path in order with its type, permissions, owner, and a file's size and
// content hash or a link's target, followed by the image's environment.
// Timestamps are left out, so rebuilding the same packages gives the same
// digest. It also returns the disk space the tree uses.
func treeDigest(dir string, env []string) (digest string, size int64, err error) {
	h := sha256.New()
	seen := map[uint64]string{} // inode → content hash, for hard links
	buf := make([]byte, 1<<20)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(dir, p)
		mode := info.Mode()
		fmt.Fprintf(h, "%q %04o %d %d", filepath.ToSlash(rel), st.Mode&0o7777, st.Uid, st.Gid)
		_, counted := seen[st.Ino]
		if !counted || !mode.IsRegular() {
			size += st.Blocks * 512
		}
		switch {
		case mode.IsDir():
			fmt.Fprint(h, " dir\n")
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, " link %q\n", target)
		case mode.IsRegular():
			sum, ok := seen[st.Ino]
			if !ok {
				if sum, err = fileHash(p, buf); err != nil {
					return err
				}
				seen[st.Ino] = sum
			}
			fmt.Fprintf(h, " file %d %s\n", info.Size(), sum)
		default:
			fmt.Fprintf(h, " other %v\n", mode.Type())
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("digest %s: %w", dir, err)
	}
	for _, kv := range env {
		fmt.Fprintf(h, "env %q\n", kv)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), size, nil
}

func fileHash(p string, buf []byte) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var fh hash.Hash = sha256.New()
	if _, err := io.CopyBuffer(fh, f, buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(fh.Sum(nil)), nil
}
