package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// corral sandbox snapshot, snapshots and fork: snapshots of live
// sandboxes over /v1/snapshots (create --snapshot makes a sandbox from
// one).

func cmdSandboxSnapshot(args []string) int {
	fs, cf := sandboxFlags("snapshot", "[flags] ID",
		"Takes a snapshot of the sandbox and prints its id: its files and, on gVisor, its\n"+
			"memory (processes, code contexts and their variables). The sandbox runs on. Make\n"+
			"sandboxes from it with `corral sandbox create --snapshot SNAPSHOT`.")
	name := fs.String("name", "", "a name for the snapshot (a name given again names the newest)")
	jsonOut := fs.Bool("json", false, "print the snapshot's description as JSON")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	sn, err := cf.client().Sandbox(fs.Arg(0)).Snapshot(ctx, sandbox.CreateSnapshotRequest{Name: *name})
	if err != nil {
		return callFailed("sandbox snapshot", err)
	}
	if *jsonOut {
		return printJSON(os.Stdout, sn)
	}
	fmt.Println(sn.SnapshotID)
	return 0
}

func cmdSandboxSnapshots(args []string) int {
	if len(args) > 0 && args[0] == "rm" {
		return cmdSnapshotsRm(args[1:])
	}
	fs, cf := sandboxFlags("snapshots", "[flags] | rm SNAPSHOT...",
		"Lists the key's snapshots, newest first; `rm` deletes snapshots (by id or name).")
	of := fs.String("sandbox", "", "only the snapshots of this sandbox")
	jsonOut := fs.Bool("json", false, "print the list as JSON ({\"snapshots\": [...]})")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	list, err := cf.client().ListSnapshots(ctx, *of)
	if err != nil {
		return callFailed("sandbox snapshots", err)
	}
	if *jsonOut {
		return printJSON(os.Stdout, sandbox.SnapshotList{Snapshots: append([]sandbox.Snapshot{}, list...)})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tNAME\tSANDBOX\tTIER\tMEMORY\tSIZE\tSTORED\tCREATED")
	for _, s := range list {
		name := s.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%.1f MiB\t%.1f MiB\t%s\n", s.SnapshotID, name, s.SandboxID, s.Tier, s.Memory,
			float64(s.SizeBytes)/(1<<20), float64(s.StoredBytes)/(1<<20), s.CreatedAt.Local().Format("2006-01-02 15:04:05"))
	}
	tw.Flush()
	return 0
}

func cmdSnapshotsRm(args []string) int {
	fs, cf := sandboxFlags("snapshots rm", "[flags] SNAPSHOT...",
		"Deletes snapshots (by id or name); sandboxes made from them are not touched.")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	client := cf.client()
	status := 0
	for _, id := range fs.Args() {
		if err := client.DeleteSnapshot(ctx, id); err != nil {
			status = max(status, callFailed("sandbox snapshots rm", err))
			continue
		}
		fmt.Printf("%s: deleted\n", id)
	}
	return status
}

func cmdSandboxFork(args []string) int {
	fs, cf := sandboxFlags("fork", "[flags] ID",
		fmt.Sprintf("Makes --count sandboxes (at most %d) from one snapshot of the sandbox, which runs on;\n"+
			"each then goes its own way. Prints each fork's id, or why it could not be made.", sandbox.MaxForks))
	count := fs.Int("count", 1, "how many sandboxes to make")
	timeout := fs.Duration("timeout", 0, "each fork's lifetime, e.g. 10m (default: the server's)")
	jsonOut := fs.Bool("json", false, "print the forks as JSON ({\"forks\": [...]})")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 4
	}
	if *timeout < 0 || *timeout%time.Second != 0 {
		fmt.Fprintf(os.Stderr, "corral sandbox fork: --timeout %s: not a positive number of seconds\n", *timeout)
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	forks, err := cf.client().Sandbox(fs.Arg(0)).Fork(ctx, sandbox.ForkRequest{Count: *count, TimeoutSeconds: int64(*timeout / time.Second)})
	if err != nil {
		return callFailed("sandbox fork", err)
	}
	if *jsonOut {
		return printJSON(os.Stdout, sandbox.ForkAnswer{Forks: forks})
	}
	status := 0
	for i, f := range forks {
		if f.Error != nil {
			fmt.Fprintf(os.Stderr, "corral sandbox fork: fork %d: %s: %s\n", i+1, f.Error.Code, f.Error.Message)
			status = 70
			continue
		}
		fmt.Println(f.Sandbox.SandboxID)
	}
	return status
}
