package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/tlscert"
)

type check struct {
	name string
	ok   bool
	// pending: not there yet but on its way (a build in progress); not
	// a problem.
	pending bool
	info    string // what was found
	fix     string // what to do when not ok
}

// cmdDoctor checks that this machine can run sandboxes and says how to fix
// each missing piece.
func cmdDoctor(args []string) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	lc := config.DefaultLocal()
	config.RegisterFlags(fs, &lc)
	var serve config.Config // serve's settings the doctor looks at
	config.RegisterFlags(fs, &serve, "tls-cert")
	if _, err := parseFlags(fs, args); err != nil {
		return 2
	}
	if err := lc.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "corral doctor:", err)
		return 2
	}
	checks := doctorChecks(lc)
	if serve.TLS.Cert != "" {
		checks = append(checks, tlsCheck(serve.TLS.Cert, time.Now()))
	}
	failed := 0
	for _, c := range checks {
		mark := "ok  "
		switch {
		case c.pending:
			mark = "wait"
		case !c.ok:
			mark = "FAIL"
			failed++
		}
		fmt.Printf("%s %-10s %s\n", mark, c.name, c.info)
		if !c.ok && c.fix != "" {
			fmt.Printf("     %-10s fix: %s\n", "", c.fix)
		}
	}
	if failed > 0 {
		fmt.Printf("\n%d problem(s); sandboxes may not work.\n", failed)
		return 1
	}
	return 0
}

func doctorChecks(lc config.Local) []check {
	var cs []check
	cs = append(cs, check{name: "root", ok: os.Geteuid() == 0,
		info: fmt.Sprintf("euid %d", os.Geteuid()), fix: "run corral as root (sudo)"})

	if cgroup.Unified() {
		b, _ := os.ReadFile(filepath.Join(cgroup.Root, "cgroup.subtree_control"))
		ctl := string(b)
		ok := strings.Contains(ctl, "memory") && strings.Contains(ctl, "pids") && strings.Contains(ctl, "cpu")
		cs = append(cs, check{name: "cgroups", ok: ok, info: "v2, controllers: " + strings.TrimSpace(ctl),
			fix: "enable the memory, pids and cpu controllers in " + cgroup.Root + "/cgroup.subtree_control"})
	} else {
		var missing []string
		for _, c := range []string{"memory", "pids", "cpu"} {
			if _, err := os.Stat(filepath.Join(cgroup.Root, c)); err != nil {
				missing = append(missing, c)
			}
		}
		info := "v1 (memory, pids, cpu)"
		if len(missing) > 0 {
			info = "v1, missing " + strings.Join(missing, ", ")
		}
		swap := "swap accounting on"
		if !cgroup.SwapAccounting() {
			swap = "no swap accounting (swap cannot be disabled per sandbox)"
		}
		cs = append(cs, check{name: "cgroups", ok: len(missing) == 0, info: info + "; " + swap,
			fix: "mount the missing cgroup v1 controllers, or boot with cgroup v2"})
	}

	runc := findBinary(lc.Runc, "runc")
	cs = append(cs, runtimeCheck("runc", runc, "runc"))
	if runc != "" {
		cs = append(cs, seccompCheck(runc))
	}
	if lc.Runsc != "off" {
		cs = append(cs, runscCheck(lc))
	}

	_, err := os.Stat("/dev/loop-control")
	cs = append(cs, check{name: "loop", ok: err == nil, info: "/dev/loop-control (per-sandbox disks)",
		fix: "modprobe loop"})
	mkfs, err := exec.LookPath("mkfs.ext4")
	cs = append(cs, check{name: "mkfs.ext4", ok: err == nil, info: mkfs, fix: "apt-get install e2fsprogs"})

	agent, err := agentBinary()
	info := agent
	if err != nil {
		info = err.Error()
	}
	cs = append(cs, check{name: "agent", ok: err == nil, info: info, fix: "make build"})

	err = os.MkdirAll(lc.DataDir, 0o711)
	if err == nil {
		err = oci.CheckReachable(lc.DataDir)
	}
	cs = append(cs, check{name: "data-dir", ok: err == nil, info: lc.DataDir, fix: fmt.Sprint(err)})
	return append(cs, templateImageCheck(lc))
}

// renewBefore is how long before its expiry a certificate is reported as
// due for renewal.
const renewBefore = 14 * 24 * time.Hour

// tlsCheck reports when the listener's certificate (--tls-cert) expires:
// a failure once it has, or before it is valid.
func tlsCheck(file string, now time.Time) check {
	c := check{name: "tls", fix: "renew the certificate in " + file + " (corral serve reads it again when it changes)"}
	leaf, err := tlscert.Leaf(file)
	if err != nil {
		c.info, c.fix = err.Error(), "give --tls-cert a PEM certificate chain, leaf first"
		return c
	}
	names := strings.Join(append(leaf.DNSNames, ipStrings(leaf.IPAddresses)...), ", ")
	switch left := leaf.NotAfter.Sub(now); {
	case now.Before(leaf.NotBefore):
		c.info = fmt.Sprintf("%s (%s) is not valid before %s", file, names, leaf.NotBefore.UTC().Format(time.RFC3339))
		c.fix = "check this machine's clock, or use a certificate valid now"
	case left <= 0:
		c.info = fmt.Sprintf("%s (%s) expired %s", file, names, leaf.NotAfter.UTC().Format(time.RFC3339))
	default:
		c.ok = true
		c.info = fmt.Sprintf("%s (%s) expires %s, in %d days", file, names, leaf.NotAfter.UTC().Format(time.RFC3339), int(left.Hours()/24))
		if left < renewBefore {
			c.info += "; renew it soon"
		}
	}
	return c
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// runtimeCheck reports a runtime's path and version and whether it is the
// pinned build scripts/deps.sh installs.
func runtimeCheck(name, path, kind string) check {
	c := check{name: name, fix: "run scripts/deps.sh (builds and installs the pinned " + kind + ")"}
	if path == "" {
		c.info = "not found"
		return c
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		c.info = fmt.Sprintf("%s: %v", path, err)
		return c
	}
	version := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	pinned := ""
	if b, err := os.ReadFile(filepath.Join(pinnedDir, kind+".version")); err == nil {
		pinned = strings.TrimSpace(string(b))
	}
	c.ok = true
	switch {
	case pinned != "" && strings.HasPrefix(path, pinnedDir+"/"):
		c.info = fmt.Sprintf("%s (%s) — pinned %s", path, version, pinned)
	case pinned != "":
		c.info = fmt.Sprintf("%s (%s) — not the pinned %s in %s/bin", path, version, pinned, pinnedDir)
	default:
		c.info = fmt.Sprintf("%s (%s) — unpinned; scripts/deps.sh installs the pinned build", path, version)
	}
	return c
}

// runscCheck is runtimeCheck for runsc, which may still be being built
// (make run builds it in the background).
func runscCheck(lc config.Local) check {
	path := findBinary(lc.Runsc, "runsc")
	lock := cmp.Or(lc.RunscBuildLock, defaultRunscBuildLock)
	if _, err := os.Stat(path); (path == "" || err != nil) && runscBuilding(lock) {
		info := "being built"
		if log := runscBuildLog(lock); log != "" {
			info += " (see " + log + ")"
		}
		return check{name: "runsc", pending: true, info: info + "; the gvisor tier starts serving when it is installed"}
	}
	return runtimeCheck("runsc", path, "runsc")
}

// templateImage is the image of the E2B SDKs' default template
// (code-interpreter), which make run builds in the background.
const templateImage = "python"

// templateImageCheck says whether the python image is here, being built,
// or missing. Missing is not a problem of the machine: executions that
// name no image run on the host image.
func templateImageCheck(lc config.Local) check {
	c := check{name: "image", ok: true}
	store, err := imageStore(lc, nil)
	if err != nil {
		c.ok, c.info = false, err.Error()
		return c
	}
	if _, err := store.Resolve(templateImage); err == nil {
		c.info = templateImage + ": built (the E2B SDKs' default template runs on it)"
		return c
	}
	if store.Building(templateImage) {
		c.pending = true
		c.info = templateImage + ": being built (see " + store.LogPath(templateImage) +
			"); until then creates that need it answer 503 image_pending"
		return c
	}
	c.info = templateImage + ": not built; E2B's default template needs it (make run builds it, or corral image build " + templateImage + ")"
	return c
}

// seccompCheck asks runc whether it was built with seccomp support.
func seccompCheck(runc string) check {
	c := check{name: "seccomp", fix: "use the runc built by scripts/deps.sh (built with -tags seccomp)"}
	out, err := exec.Command(runc, "features").Output()
	if err != nil {
		c.info = fmt.Sprintf("runc features: %v", err)
		return c
	}
	var f struct {
		Linux struct {
			Seccomp struct {
				Enabled *bool `json:"enabled"`
			} `json:"seccomp"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &f); err != nil {
		c.info = fmt.Sprintf("runc features: %v", err)
		return c
	}
	c.ok = f.Linux.Seccomp.Enabled != nil && *f.Linux.Seccomp.Enabled
	c.info = "runc built with seccomp"
	if !c.ok {
		c.info = "runc built without seccomp"
	}
	return c
}
