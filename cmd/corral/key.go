package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/e2b"
)

// cmdKey mints API keys.
func cmdKey(args []string) int {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprintln(os.Stderr, "usage: corral key new [--tenant NAME]")
		return 2
	}
	fs := flag.NewFlagSet("key new", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, "usage: corral key new [--tenant NAME]\n\n"+
			"Prints a new API key (e2b_ and 40 hex digits, the shape the E2B SDKs accept) on the first\n"+
			"line, then the configuration that gives it to a tenant: the server keeps only its SHA-256.\n\n")
		fs.PrintDefaults()
	}
	tenant := fs.String("tenant", "", "the tenant the key is for: prints its [[tenants]] block")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if *tenant != "" && !api.ValidTenantName(*tenant) {
		fmt.Fprintf(os.Stderr, "corral key: tenant name %q: use 1-63 lowercase letters, digits, - and _\n", *tenant)
		return 2
	}
	key := e2b.NewAPIKey()
	fmt.Println(key)
	if *tenant == "" {
		fmt.Printf("api_key_sha256 = [%q]   # in the tenant's [[tenants]] block of corral.toml\n", api.HashKey(key))
		return 0
	}
	fmt.Printf("\n[[tenants]]\nname           = %q\napi_key_sha256 = [%q]\n", *tenant, api.HashKey(key))
	return 0
}
