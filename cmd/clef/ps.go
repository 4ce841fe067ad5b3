package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/menubar"
	"github.com/clefrt/clef/server"
)

func init() {
	var addr, token string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List the models the daemon has loaded, their memory and requests served",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv("CLEF_TOKEN")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			ps, err := menubar.NewClient(addr, token).PS(ctx)
			if err != nil {
				return fmt.Errorf("no daemon at %s (start one with clef serve): %w", addr, err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				data, _ := json.MarshalIndent(ps, "", "  ")
				fmt.Fprintf(out, "%s\n", data)
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODEL\tSTATE\tMEMORY\tREQUESTS\tERRORS\tP50\tP99\tIDLE\tPATH")
			for _, m := range ps.Models {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", m.Name, m.State, psBytes(m.ResidentBytes),
					m.Requests, m.Errors, msf(m.P50MS), msf(m.P99MS), (time.Duration(m.IdleS) * time.Second).String(), m.Path)
			}
			tw.Flush()
			fmt.Fprintf(out, "daemon pid %d at %s, up %s; queue %d/%d",
				ps.Daemon.PID, ps.Daemon.Addr, (time.Duration(ps.Daemon.UptimeS) * time.Second).String(), ps.Queue.Depth, ps.Queue.Capacity)
			if c := ps.PrefixCache; c != nil {
				fmt.Fprintf(out, "; prefix cache %s of %s, %d entries, %d hits, %d misses", psBytes(c.Bytes), psBytes(c.MaxBytes), c.Entries, c.Hits, c.Misses)
			}
			fmt.Fprintln(out)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", server.DefaultAddr, "daemon address")
	cmd.Flags().StringVar(&token, "token", "", "the daemon's bearer token (default $CLEF_TOKEN)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the daemon's answer as JSON")
	rootCmd.AddCommand(cmd)
}

func psBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func msf(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", v)
}
