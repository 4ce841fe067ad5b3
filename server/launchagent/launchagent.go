// Package launchagent writes and removes the macOS LaunchAgent that starts
// `clef serve` at login. It only handles the property list file under the
// user's home; loading it into launchd is the caller's choice. It uses the
// standard library only and runs (and is tested) on any system.
package launchagent

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Label is the launchd label of the daemon's agent.
const Label = "com.clefrt.clef.serve"

// Config says what the agent runs.
type Config struct {
	// Program is the absolute path of the clef binary.
	Program string
	// Args follow the program, e.g. {"serve", "--model", "/path"}. Every
	// local user sees them (ps): a secret goes in Env.
	Args []string
	// Env is the agent's environment (EnvironmentVariables), e.g. the
	// daemon's CLEF_TOKEN; the property list is only readable by its owner.
	Env map[string]string
	// LogPath receives the daemon's stdout and stderr.
	LogPath string
	// KeepAlive restarts the daemon when it exits with an error.
	KeepAlive bool
}

// Path is the property list's location under home.
func Path(home string) string {
	return filepath.Join(home, "Library", "LaunchAgents", Label+".plist")
}

// DefaultLogPath is where the agent's logs go unless Config.LogPath says otherwise.
func DefaultLogPath(home string) string {
	return filepath.Join(home, "Library", "Logs", "clef", "serve.log")
}

// Plist renders the agent's property list.
func Plist(cfg Config) ([]byte, error) {
	if !filepath.IsAbs(cfg.Program) {
		return nil, fmt.Errorf("launchagent: program %q is not an absolute path", cfg.Program)
	}
	if cfg.LogPath != "" && !filepath.IsAbs(cfg.LogPath) {
		return nil, fmt.Errorf("launchagent: log path %q is not an absolute path", cfg.LogPath)
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.WriteString(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">` + "\n")
	b.WriteString(`<plist version="1.0">` + "\n<dict>\n")
	key := func(k string) { fmt.Fprintf(&b, "\t<key>%s</key>\n", esc(k)) }
	str := func(indent, s string) { fmt.Fprintf(&b, "%s<string>%s</string>\n", indent, esc(s)) }
	key("Label")
	str("\t", Label)
	key("ProgramArguments")
	b.WriteString("\t<array>\n")
	str("\t\t", cfg.Program)
	for _, a := range cfg.Args {
		str("\t\t", a)
	}
	b.WriteString("\t</array>\n")
	if len(cfg.Env) > 0 {
		names := make([]string, 0, len(cfg.Env))
		for k := range cfg.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return nil, fmt.Errorf("launchagent: environment variable name %q is not valid", k)
			}
			names = append(names, k)
		}
		sort.Strings(names)
		key("EnvironmentVariables")
		b.WriteString("\t<dict>\n")
		for _, k := range names {
			fmt.Fprintf(&b, "\t\t<key>%s</key>\n", esc(k))
			str("\t\t", cfg.Env[k])
		}
		b.WriteString("\t</dict>\n")
	}
	key("RunAtLoad")
	b.WriteString("\t<true/>\n")
	if cfg.KeepAlive {
		key("KeepAlive")
		b.WriteString("\t<dict>\n\t\t<key>SuccessfulExit</key>\n\t\t<false/>\n\t</dict>\n")
	}
	key("ProcessType")
	str("\t", "Interactive")
	if cfg.LogPath != "" {
		key("StandardOutPath")
		str("\t", cfg.LogPath)
		key("StandardErrorPath")
		str("\t", cfg.LogPath)
	}
	b.WriteString("</dict>\n</plist>\n")
	return b.Bytes(), nil
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// Install writes the agent's property list under home (mode 0600: its
// environment may hold a bearer token) and creates the log directory. It
// returns the path written.
func Install(home string, cfg Config) (string, error) {
	if home == "" {
		return "", errors.New("launchagent: no home directory")
	}
	data, err := Plist(cfg)
	if err != nil {
		return "", err
	}
	p := Path(home)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("launchagent: %w", err)
	}
	if cfg.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.LogPath), 0o755); err != nil {
			return "", fmt.Errorf("launchagent: %w", err)
		}
	}
	tmp := p + ".tmp"
	os.Remove(tmp) // a leftover keeps its mode through WriteFile
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return "", fmt.Errorf("launchagent: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("launchagent: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("launchagent: %w", err)
	}
	return p, nil
}

// Uninstall removes the agent's property list. removed is false when there
// was none.
func Uninstall(home string) (path string, removed bool, err error) {
	p := Path(home)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return p, false, nil
		}
		return p, false, fmt.Errorf("launchagent: %w", err)
	}
	return p, true, nil
}

// Installed reports whether the agent's property list exists under home.
func Installed(home string) bool {
	_, err := os.Stat(Path(home))
	return err == nil
}
