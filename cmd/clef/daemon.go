package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/server"
	"github.com/clefrt/clef/server/launchagent"
)

func init() {
	daemon := &cobra.Command{
		Use:   "daemon",
		Short: "Run clef serve at login on macOS (LaunchAgent)",
	}
	var model, addr, token, ffmpeg string
	var idle string
	var load, unload bool
	install := &cobra.Command{
		Use:   "install",
		Short: "Write the LaunchAgent that starts clef serve at login",
		Long: `Write ~/Library/LaunchAgents/` + launchagent.Label + `.plist, which starts
"clef serve --model PATH" at login and restarts it if it fails, with its log in
~/Library/Logs/clef/serve.log. On macOS it is also loaded now (launchctl).
--token reaches clef serve as CLEF_TOKEN in the agent's environment (the
plist is readable by you only), never in its arguments, which ps shows.

Videos are decoded with ffmpeg. launchd starts agents with a PATH that lacks
Homebrew's, so the ffmpeg found now (--ffmpeg, else $CLEF_FFMPEG, else PATH)
is written into the agent as an absolute path; without one the agent's PATH
covers Homebrew's directories, and videos are refused until ffmpeg is
installed (brew install ffmpeg) and the daemon restarted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				model = os.Getenv("CLEF_MODEL")
			}
			if model == "" {
				return &exitError{2, errors.New("--model is required: the daemon needs a model to load at login")}
			}
			// A Hub name stays a name in the agent, so each start resolves
			// the snapshot cached then; a path is made absolute.
			abs := model
			if !isHubName(model) {
				var err error
				if abs, err = filepath.Abs(model); err != nil {
					return err
				}
				if _, err := os.Stat(abs); err != nil {
					return &exitError{2, fmt.Errorf("--model: %w", err)}
				}
			} else if _, err := modelPath(model); err != nil {
				return &exitError{2, err}
			}
			prog, err := os.Executable()
			if err != nil {
				return err
			}
			if p, err := filepath.EvalSymlinks(prog); err == nil {
				prog = p
			}
			home, err := os.UserHomeDir()
			if err != nil {
				return err
			}
			args := []string{"serve", "--model", abs, "--addr", addr}
			var env map[string]string
			if token != "" {
				// Through the environment, not the arguments, which every
				// local user sees in ps; the plist is mode 0600.
				env = map[string]string{"CLEF_TOKEN": token}
			}
			if t, err := video.Find(ffmpeg); err == nil {
				abs, err := filepath.Abs(t.FFmpeg)
				if err != nil {
					return err
				}
				args = append(args, "--ffmpeg", abs)
			} else if ffmpeg != "" {
				return &exitError{2, fmt.Errorf("--ffmpeg: %w", err)}
			} else {
				if env == nil {
					env = map[string]string{}
				}
				env["PATH"] = agentPath
				fmt.Fprintf(cmd.ErrOrStderr(), "clef: note: %v\nclef: the daemon serves everything but videos, which it refuses until ffmpeg is installed and the daemon restarted\n", err)
			}
			if idle != "" {
				if _, err := time.ParseDuration(idle); err != nil {
					return &exitError{2, fmt.Errorf("--idle-unload: %w", err)}
				}
				args = append(args, "--idle-unload", idle)
			}
			p, err := launchagent.Install(home, launchagent.Config{Program: prog, Args: args, Env: env, LogPath: launchagent.DefaultLogPath(home), KeepAlive: true})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "wrote", p)
			if load && runtime.GOOS == "darwin" {
				launchctl(cmd, "bootout", p)
				if err := launchctl(cmd, "bootstrap", p); err != nil {
					return fmt.Errorf("launchctl bootstrap: %w (the plist is written; it loads at next login)", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "loaded: clef serve is starting; check with clef ps")
			}
			return nil
		},
	}
	install.Flags().StringVar(&model, "model", "", "model the daemon loads (default $CLEF_MODEL)")
	install.Flags().StringVar(&addr, "addr", server.DefaultAddr, "address the daemon listens on")
	install.Flags().StringVar(&token, "token", "", "bearer token the daemon requires (given to clef serve as $CLEF_TOKEN from the plist, mode 0600; never in its arguments)")
	install.Flags().StringVar(&idle, "idle-unload", "", "unload the model after this long idle (e.g. 30m)")
	install.Flags().BoolVar(&load, "load", true, "on macOS, load the agent now with launchctl")
	install.Flags().StringVar(&ffmpeg, "ffmpeg", "", "ffmpeg the daemon decodes videos with, ffprobe beside it (default: the one $CLEF_FFMPEG, then PATH, names now)")

	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove the LaunchAgent (and, on macOS, stop the daemon it started)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			home, err := os.UserHomeDir()
			if err != nil {
				return err
			}
			p := launchagent.Path(home)
			if unload && runtime.GOOS == "darwin" && launchagent.Installed(home) {
				launchctl(cmd, "bootout", p)
			}
			p, removed, err := launchagent.Uninstall(home)
			if err != nil {
				return err
			}
			if removed {
				fmt.Fprintln(cmd.OutOrStdout(), "removed", p)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "not installed:", p)
			}
			return nil
		},
	}
	uninstall.Flags().BoolVar(&unload, "load", true, "on macOS, also unload the agent with launchctl")
	daemon.AddCommand(install, uninstall)
	rootCmd.AddCommand(daemon)
}

// agentPath is the agent's PATH when no ffmpeg was found at install: the
// system's directories after Homebrew's (Apple silicon, then Intel), so an
// ffmpeg installed later is found when the daemon next starts.
const agentPath = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// launchctl runs launchctl on the user's GUI domain.
func launchctl(cmd *cobra.Command, verb, plist string) error {
	c := exec.Command("launchctl", verb, "gui/"+strconv.Itoa(os.Getuid()), plist)
	c.Stdout, c.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	return c.Run()
}
