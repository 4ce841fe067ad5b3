// Command clef runs the Clef-Omni decision model locally: decide on a record,
// serve the daemon, quantize, inspect, benchmark. Each subcommand lives in its
// own file and registers itself on rootCmd from an init function.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:           "clef",
	Short:         "Run the Clef-Omni decision model locally",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// exitError carries a process exit code through cobra's RunE.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	if err := rootCmd.Execute(); err != nil {
		code := 1
		if ee, ok := err.(*exitError); ok {
			code = ee.code
		}
		if err.Error() != "" {
			fmt.Fprintln(os.Stderr, "clef:", err)
		}
		os.Exit(code)
	}
}
