package main

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// triageRequest is examples/triage.json, copied here (go:embed cannot reach
// outside the package; a test keeps the two identical) so the demo runs from
// any directory.
//
//go:embed demo_triage.json
var triageRequest []byte

func init() {
	var f decideFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Decide an example triage ticket end to end and show the time per stage",
		Long: `Run clef decide --format table on an example support-ticket triage request
(examples/triage.json): a noul, a choice and a score question answered from
one forward pass. Without --model or CLEF_MODEL it uses the embedded tiny
model, which is synthetic: its probabilities mean nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.format = "table"
			model := f.model
			if model == "" {
				model = os.Getenv("CLEF_MODEL")
			}
			if model == "" {
				fmt.Fprintln(cmd.OutOrStdout(), "clef demo: no model given (--model or CLEF_MODEL), so this runs the embedded tiny model.")
				fmt.Fprintln(cmd.OutOrStdout(), "It is SYNTHETIC (random weights): the pipeline is real, its probabilities mean nothing.")
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "clef demo: model %s\n", model)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "request: examples/triage.json (a support ticket: urgent? which team? how frustrated?)")
			fmt.Fprintln(cmd.OutOrStdout())
			return runDecide(cmd, &f, triageRequest, true)
		},
	}
	f.register(cmd)
	cmd.Flags().Lookup("format").Hidden = true
	rootCmd.AddCommand(cmd)
}
