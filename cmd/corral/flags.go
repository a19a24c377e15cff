package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envFallback sets every flag of fs that was not given on the command line
// from CORRAL_<NAME> (dashes become underscores), so deployments can
// configure by environment alone. It returns the names of the flags that
// are now set, from either source.
func envFallback(fs *flag.FlagSet) (map[string]bool, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := "CORRAL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
			set[f.Name] = true
		}
	})
	return set, err
}

// parseFlags parses args and applies the environment fallback; it returns
// which flags were set by either.
func parseFlags(fs *flag.FlagSet, args []string) (map[string]bool, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return envFallback(fs)
}
