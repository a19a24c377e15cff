package main

import (
	"flag"
	"os"

	"github.com/corralhq/corral/internal/config"
)

// parseFlags parses args, then sets every flag not given on the command
// line from CORRAL_<NAME> (dashes become underscores), so deployments can
// configure by environment alone. It returns which flags were set by
// either.
func parseFlags(fs *flag.FlagSet, args []string) (map[string]bool, error) {
	return config.ParseFlags(fs, args, os.LookupEnv)
}
