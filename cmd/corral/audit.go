package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// cmdAudit lists the caller's audit events (GET /v1/audit), or checks the
// chains in the store (verify).
func cmdAudit(args []string) int {
	if len(args) > 0 && args[0] == "verify" {
		return cmdAuditVerify(args[1:])
	}
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	remoteUsage(fs, "[flags] | corral audit verify [flags]",
		"Lists the audit events of the key's tenant, oldest first, one page (--limit) at a time;\n"+
			"the next page's cursor is printed on stderr. --all follows every page.\n"+
			"corral audit verify checks the hash chains in the store (corral audit verify -h).")
	var cf clientFlags
	cf.register(fs)
	var (
		opts         sandbox.AuditOptions
		since, until string
		jsonOut, all bool
	)
	fs.StringVar(&opts.SandboxID, "sandbox", "", "only this sandbox's events")
	fs.StringVar(&opts.ExecutionID, "execution", "", "only this execution's events")
	fs.StringVar(&opts.Action, "action", "", "only this action (process.start, file.write, egress.denied, ...)")
	fs.StringVar(&opts.KeyID, "key-id", "", "only this key's events (the first 16 hex digits of its SHA-256)")
	fs.StringVar(&since, "since", "", "at or after: an RFC 3339 time, or a duration ago such as 1h")
	fs.StringVar(&until, "until", "", "before: an RFC 3339 time, or a duration ago")
	fs.IntVar(&opts.Limit, "limit", 50, "page size, 1 to 1000")
	fs.StringVar(&opts.Cursor, "cursor", "", "continue from a previous page")
	fs.BoolVar(&jsonOut, "json", false, "print JSON lines, one event a line (what a SIEM takes)")
	fs.BoolVar(&all, "all", false, "follow the cursor through every page")
	if _, code, ok := parseRemote(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 4
	}
	if !parseWindow("corral audit", since, until, &opts.Since, &opts.Until) {
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	client := cf.client()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	if !jsonOut {
		fmt.Fprintln(tw, "SEQ\tTIME\tKEY\tSANDBOX\tACTION\tOUTCOME\tFIELDS")
	}
	next := ""
	for {
		p, err := client.Audit(ctx, opts)
		if err != nil {
			tw.Flush()
			return callFailed("audit", err)
		}
		if jsonOut {
			os.Stdout.Write(audit.JSONLines(p.Events))
		}
		for _, e := range p.Events {
			if !jsonOut {
				where := e.SandboxID
				if where == "" {
					where = e.ExecutionID
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Time.Local().Format("2006-01-02 15:04:05.000"),
					dash(e.KeyID), dash(where), e.Action, e.Outcome, fieldsText(e))
			}
		}
		next = p.NextCursor
		if !all || next == "" {
			break
		}
		opts.Cursor = next
	}
	tw.Flush()
	if next != "" {
		fmt.Fprintf(os.Stderr, "more: corral audit --cursor %s (or --all)\n", next)
	}
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fieldsText is an event's fields, and its error, on one line.
func fieldsText(e sandbox.AuditEvent) string {
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := e.Fields[k]
		if len(v) > 80 {
			v = v[:77] + "..."
		}
		fmt.Fprintf(&b, "%s=%s ", k, v)
	}
	if e.Error != "" {
		fmt.Fprintf(&b, "error=%q", e.Error)
	}
	return strings.TrimSpace(b.String())
}

// cmdAuditVerify checks tenants' hash chains where they are stored. It
// reads the store itself, as an operator with the database's credentials,
// rather than asking a server: the check must not trust the process whose
// records it checks, needs no admin credential the API does not have, and
// works on a copy or a backup of the database with no server running.
func cmdAuditVerify(args []string) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: corral audit verify [--config FILE] [--store URL] [--data-dir DIR] [--tenant T,...] [--from N] [--to N]\n\n"+
			"Checks each tenant's audit hash chain in the store corral serve uses (the same --config,\n"+
			"--store, --data-dir and CORRAL_* settings) from event --from to event --to (default: from\n"+
			"the first kept to the last), and names the first broken link: an event edited, a link\n"+
			"altered, an event deleted. Exit status 0: every chain holds; 1: one is broken; 70: the\n"+
			"store could not be read.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var (
		file, storeURL, dataDir, tenants string
		from, to                         int64
	)
	fs.StringVar(&file, "config", "", "corral serve's configuration file (its store, data_dir and tenants)")
	fs.StringVar(&storeURL, "store", "", "the store: a SQLite path or a postgres:// URL (env CORRAL_STORE)")
	fs.StringVar(&dataDir, "data-dir", "", "corral serve's data directory, whose corral.db is the default store (env CORRAL_DATA_DIR)")
	fs.StringVar(&tenants, "tenant", "", "tenants to check, comma-separated (default: every configured tenant)")
	fs.Int64Var(&from, "from", 0, "first event number to check (default: the first kept)")
	fs.Int64Var(&to, "to", 0, "last event number to check (default: the chain's head)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 4
	}
	var cargs []string
	for _, a := range []struct{ name, v string }{{"config", file}, {"store", storeURL}, {"data-dir", dataDir}} {
		if a.v != "" {
			cargs = append(cargs, "--"+a.name, a.v)
		}
	}
	cfg, err := config.Parse("audit verify", cargs, os.LookupEnv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral audit verify:", err)
		return 4
	}
	names := planTenants(cfg)
	if tenants != "" {
		names = strings.Split(tenants, ",")
	}
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, "corral audit verify: no tenant configured; name them with --tenant")
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	st, err := openStore(ctx, storeBackend(cfg))
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral audit verify: open store:", err)
		return 70
	}
	defer st.Close()
	code := 0
	for _, t := range names {
		n, err := store.VerifyAudit(ctx, st, t, from, to)
		var b *audit.Broken
		switch {
		case errors.As(err, &b):
			fmt.Printf("tenant %s: BROKEN at event %d: %s (%d events before it hold)\n", t, b.Seq, b.Reason, n)
			code = max(code, 1)
		case err != nil:
			fmt.Fprintf(os.Stderr, "corral audit verify: tenant %s: %v\n", t, err)
			code = 70
		default:
			fmt.Printf("tenant %s: ok, %d events\n", t, n)
		}
	}
	return code
}

// planTenants names the tenants corral serve would serve with cfg.
func planTenants(cfg config.Config) []string {
	var out []string
	for _, t := range tenants(cfg) {
		out = append(out, t.Name)
	}
	return out
}
