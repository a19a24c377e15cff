package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envFallback sets every flag of fs that was not given on the command line
// from CORRAL_<NAME> (dashes become underscores), so deployments can
// configure by environment alone.
func envFallback(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := "CORRAL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}

// parseFlags parses args and applies the environment fallback.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return envFallback(fs)
}
