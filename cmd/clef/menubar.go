package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/hub"
	"github.com/clefrt/clef/menubar"
	"github.com/clefrt/clef/server"
)

func init() {
	var o menubar.Options
	cmd := &cobra.Command{
		Use:   "menubar",
		Short: "macOS menu-bar item for the daemon (headless status line elsewhere)",
		Long: `Show a menu-bar item with the daemon's state (idle, loading, serving), the
requests served and their p50 latency, and a menu to start and stop the daemon,
pick a model, open the logs, toggle launch at login and quit. It talks to the
daemon over HTTP only. Built without cgo or off macOS, it prints the status
line whenever it changes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Model == "" {
				o.Model = os.Getenv("CLEF_MODEL")
			}
			if o.Token == "" {
				o.Token = os.Getenv("CLEF_TOKEN")
			}
			if o.ModelsDir == "" {
				if home, err := os.UserHomeDir(); err == nil {
					o.ModelsDir = filepath.Join(home, ".clef", "models")
				}
			}
			if c, err := hub.DefaultCache(); err == nil {
				o.Hub = c // models pulled with clef pull, by name
			}
			o.Out = cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return menubar.Run(ctx, o)
		},
	}
	cmd.Flags().StringVar(&o.Addr, "addr", server.DefaultAddr, "daemon address")
	cmd.Flags().StringVar(&o.Token, "token", "", "the daemon's bearer token (default $CLEF_TOKEN)")
	cmd.Flags().StringVar(&o.Model, "model", "", "model the daemon is started with (default $CLEF_MODEL)")
	cmd.Flags().StringVar(&o.ModelsDir, "models-dir", "", "directory of models offered in the Model menu (default ~/.clef/models)")
	rootCmd.AddCommand(cmd)
}
