package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/hub"
)

func init() {
	cmd := &cobra.Command{
		Use:   "rm ORG/NAME[@REVISION]",
		Short: "Remove a model (or one revision of it) from the Hugging Face cache",
		Long: `rm deletes a cached model: without @REVISION the whole model folder and its
quantized files; with it, that revision's snapshot, the refs pointing to
it, its quantized files, and the blobs its snapshot linked to that no other
snapshot uses (blobs of a download in progress stay).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := hub.ParseRef(args[0])
			if err != nil || ref.Quant != "" {
				return &exitError{2, fmt.Errorf("rm: want ORG/NAME or ORG/NAME@REVISION, got %q", args[0])}
			}
			cache, err := hub.DefaultCache()
			if err != nil {
				return err
			}
			all := !strings.Contains(args[0], "@")
			freed, err := cache.Remove(ref, all)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s (%s freed)\n", args[0], humanBytes(freed))
			return nil
		},
	}
	rootCmd.AddCommand(cmd)
}
