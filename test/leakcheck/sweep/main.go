// Command sweep removes what an earlier test run, killed half-way, left of
// its sandboxes (package leakcheck), so that this run's leak check sees
// only its own. make test runs it first; it prints what it removed.
package main

import (
	"fmt"
	"os"

	"github.com/corralhq/corral/test/leakcheck"
)

func main() {
	left, err := leakcheck.Sweep()
	for _, l := range left {
		fmt.Println("swept", l)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sweep:", err)
		os.Exit(1)
	}
}
