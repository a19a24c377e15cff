package images

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/corralhq/corral/internal/runtime"
)

// HostName is the built-in image: the host's /usr, read-only, under a
// synthetic /etc. It needs no build and runs whatever interpreters the host
// has installed.
const HostName = "host"

// hostLayoutVersion changes whenever the layout below changes.
const hostLayoutVersion = "5"

// Mount points every rootfs must have: the runtime mounts over them and the
// root is read-only.
var mountPoints = []string{"proc", "sys", "dev", "tmp", "workspace", ".corral", ".corral/cache", ".corral/run"}

// hostEtc is the synthetic /etc: nothing is copied from the host's.
func hostEtc(uid, gid int) map[string]string {
	return map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\n"+
			"sandbox:x:%d:%d:sandbox:/workspace:/bin/bash\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", uid, gid),
		"group": fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", gid),
		"hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n" +
			"networks: files\nprotocols: files\nservices: files\n",
		// No network by default: queries fail at once on loopback instead
		// of waiting for a timeout.
		"resolv.conf": "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
		"hostname":    "sandbox\n",
		"os-release":  "NAME=\"Corral host image\"\nID=corral\n",
	}
}

// Host prepares the host image under dir (created once, reused after).
func Host(dir string, uid, gid int) (Image, error) {
	rootfs := filepath.Join(dir, "rootfs")
	mounts, links, err := hostLayout()
	if err != nil {
		return Image{}, err
	}
	etc := hostEtc(uid, gid)
	digest := hostDigest(etc, mounts, links)
	img := Image{Name: HostName, Rootfs: rootfs, Mounts: mounts, Digest: digest}
	if b, err := os.ReadFile(filepath.Join(dir, "digest")); err == nil && strings.TrimSpace(string(b)) == digest {
		return img, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Image{}, fmt.Errorf("create image dir: %w", err)
	}
	staging, err := os.MkdirTemp(dir, "rootfs-")
	if err != nil {
		return Image{}, fmt.Errorf("create image dir: %w", err)
	}
	defer os.RemoveAll(staging)
	if err := os.Chmod(staging, 0o755); err != nil {
		return Image{}, fmt.Errorf("create image dir: %w", err)
	}
	for _, m := range mountPoints {
		if err := os.Mkdir(filepath.Join(staging, m), 0o755); err != nil {
			return Image{}, fmt.Errorf("create mount point: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(staging, ".corral", "agent"), nil, 0o755); err != nil {
		return Image{}, fmt.Errorf("create agent mount point: %w", err)
	}
	for _, m := range mounts {
		if err := os.MkdirAll(filepath.Join(staging, m.Destination), 0o755); err != nil {
			return Image{}, fmt.Errorf("create mount point: %w", err)
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(staging, name)); err != nil {
			return Image{}, fmt.Errorf("create link: %w", err)
		}
	}
	if err := os.Mkdir(filepath.Join(staging, "etc"), 0o755); err != nil {
		return Image{}, fmt.Errorf("create etc: %w", err)
	}
	for name, content := range etc {
		if err := os.WriteFile(filepath.Join(staging, "etc", name), []byte(content), 0o644); err != nil {
			return Image{}, fmt.Errorf("write etc/%s: %w", name, err)
		}
	}
	// Swap the new rootfs in. A sandbox still running on the old one keeps
	// it through its mount namespace.
	old := rootfs + ".old"
	_ = os.RemoveAll(old)
	if err := os.Rename(rootfs, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Image{}, fmt.Errorf("replace rootfs: %w", err)
	}
	if err := os.Rename(staging, rootfs); err != nil {
		return Image{}, fmt.Errorf("install rootfs: %w", err)
	}
	_ = os.RemoveAll(old)
	if err := os.WriteFile(filepath.Join(dir, "digest"), []byte(digest+"\n"), 0o644); err != nil {
		return Image{}, fmt.Errorf("write digest: %w", err)
	}
	return img, nil
}

// hostLayout mirrors the host's top-level program directories: /usr is
// bound, and /bin, /lib and friends become the same links as on the host, or
// binds where the host has real directories (no merged /usr).
func hostLayout() ([]runtime.Mount, map[string]string, error) {
	mounts := []runtime.Mount{{Source: "/usr", Destination: "/usr"}}
	links := map[string]string{}
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		p := "/" + name
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("inspect %s: %w", p, err)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, nil, fmt.Errorf("read link %s: %w", p, err)
			}
			links[name] = target
		case fi.IsDir():
			mounts = append(mounts, runtime.Mount{Source: p, Destination: p})
		}
	}
	return mounts, links, nil
}

func hostDigest(etc map[string]string, mounts []runtime.Mount, links map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "layout %s\n", hostLayoutVersion)
	var keys []string
	for k := range etc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "etc/%s %q\n", k, etc[k])
	}
	for _, m := range mounts {
		fmt.Fprintf(h, "bind %s %s\n", m.Source, m.Destination)
	}
	keys = keys[:0]
	for k := range links {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "link %s %s\n", k, links[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
