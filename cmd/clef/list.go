package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/hub"
)

func init() {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the models in the Hugging Face cache and their quantized files",
		Long: `list shows every model of the Hugging Face cache ($HF_HUB_CACHE, else
$HF_HOME/hub, else ~/.cache/huggingface/hub), whoever downloaded it: each
revision with its commit, files and size, and the quantized GGUF files
clef pull --quantize wrote ($HF_HOME/clef/quantized). SIZE counts each
blob once (revisions share them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := hub.DefaultCache()
			if err != nil {
				return err
			}
			repos, err := cache.List()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(repos) == 0 {
				fmt.Fprintf(out, "no models in %s (clef pull ORG/NAME fetches one)\n", cache.Dir)
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODEL\tREVISION\tCOMMIT\tFILES\tSIZE")
			for _, r := range repos {
				size := humanBytes(r.Size)
				if r.Partial > 0 {
					size += fmt.Sprintf(" (%s partial)", humanBytes(r.Partial))
				}
				if len(r.Revisions) == 0 {
					fmt.Fprintf(tw, "%s\t-\t-\t0\t%s\n", r.Repo, size)
				}
				for i, rv := range r.Revisions {
					name := r.Repo
					if i > 0 {
						name, size = "", ""
					}
					refs := strings.Join(rv.Refs, ",")
					if refs == "" {
						refs = "-"
					}
					files := fmt.Sprint(rv.Files)
					if !rv.Weights && rv.Files > 0 {
						files += " (no weights)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, refs, short(rv.Commit), files, size)
					for _, q := range rv.Quantized {
						fmt.Fprintf(tw, "  %s:%s\t%s\t%s\tgguf\t%s\n", r.Repo, q.Type, refs, short(rv.Commit), humanBytes(q.Size))
					}
				}
			}
			return tw.Flush()
		},
	}
	rootCmd.AddCommand(cmd)
}

// short abbreviates a commit hash as git does.
func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
