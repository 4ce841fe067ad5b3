package launchagent

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallUninstall(t *testing.T) {
	home := t.TempDir()
	if Installed(home) {
		t.Fatal("installed in an empty home")
	}
	cfg := Config{
		Program:   "/usr/local/bin/clef",
		Args:      []string{"serve", "--model", "/Models/clef omni & <4bit>", "--token", "s3cret"},
		LogPath:   DefaultLogPath(home),
		KeepAlive: true,
	}
	p, err := Install(home, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, "Library", "LaunchAgents", Label+".plist"); p != want {
		t.Fatalf("path %s, want %s", p, want)
	}
	if !Installed(home) {
		t.Fatal("not installed after Install")
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Dir(cfg.LogPath)); err != nil {
		t.Errorf("log dir not created: %v", err)
	}
	data, _ := os.ReadFile(p)
	// Well-formed XML whose ProgramArguments round-trip, special characters included.
	args := programArguments(t, data)
	want := append([]string{cfg.Program}, cfg.Args...)
	if strings.Join(args, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("ProgramArguments %q, want %q", args, want)
	}
	for _, s := range []string{"<key>RunAtLoad</key>", "<key>KeepAlive</key>", "<key>StandardErrorPath</key>", Label} {
		if !strings.Contains(string(data), s) {
			t.Errorf("plist lacks %s", s)
		}
	}
	_, removed, err := Uninstall(home)
	if err != nil || !removed {
		t.Fatalf("Uninstall: removed=%v err=%v", removed, err)
	}
	if Installed(home) {
		t.Fatal("still installed after Uninstall")
	}
	_, removed, err = Uninstall(home)
	if err != nil || removed {
		t.Fatalf("second Uninstall: removed=%v err=%v", removed, err)
	}
}

func TestPlistRejectsRelativePaths(t *testing.T) {
	if _, err := Plist(Config{Program: "clef"}); err == nil {
		t.Error("relative program accepted")
	}
	if _, err := Plist(Config{Program: "/bin/clef", LogPath: "log.txt"}); err == nil {
		t.Error("relative log path accepted")
	}
	if _, err := Install("", Config{Program: "/bin/clef"}); err == nil {
		t.Error("empty home accepted")
	}
}

// programArguments decodes the plist's ProgramArguments array.
func programArguments(t *testing.T, data []byte) []string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(data)))
	d.Strict = false
	var out []string
	inArgs, lastKey := false, ""
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		switch e := tok.(type) {
		case xml.StartElement:
			switch e.Name.Local {
			case "key":
				var k string
				if err := d.DecodeElement(&k, &e); err != nil {
					t.Fatal(err)
				}
				lastKey = k
			case "array":
				inArgs = lastKey == "ProgramArguments"
			case "string":
				var s string
				if err := d.DecodeElement(&s, &e); err != nil {
					t.Fatal(err)
				}
				if inArgs {
					out = append(out, s)
				}
			}
		case xml.EndElement:
			if e.Name.Local == "array" {
				inArgs = false
			}
		}
	}
	return out
}

// A secret travels in EnvironmentVariables, never in ProgramArguments (ps
// shows those to every local user), and the file is 0600 even over a
// leftover temporary file of another mode.
func TestEnvironment(t *testing.T) {
	home := t.TempDir()
	p := Path(home)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p+".tmp", []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Program: "/bin/clef", Args: []string{"serve"}, Env: map[string]string{"CLEF_TOKEN": "s3<c>&t", "A": "1"}}
	if _, err := Install(home, cfg); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if args := programArguments(t, data); strings.Contains(strings.Join(args, " "), "s3<c>&t") {
		t.Errorf("token in ProgramArguments: %q", args)
	}
	env := environment(t, data)
	if len(env) != 2 || env["CLEF_TOKEN"] != "s3<c>&t" || env["A"] != "1" {
		t.Errorf("EnvironmentVariables %v", env)
	}
	if _, err := Plist(Config{Program: "/bin/clef", Env: map[string]string{"A=B": "x"}}); err == nil {
		t.Error("variable name with '=' accepted")
	}
}

// environment decodes the plist's EnvironmentVariables dictionary.
func environment(t *testing.T, data []byte) map[string]string {
	t.Helper()
	var doc struct {
		Dict struct {
			Inner []byte `xml:",innerxml"`
		} `xml:"dict"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(doc.Dict.Inner)))
	env := map[string]string{}
	depth, inEnv, lastKey, name := 0, false, "", ""
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		switch e := tok.(type) {
		case xml.StartElement:
			switch {
			case e.Name.Local == "dict":
				depth++
				inEnv = lastKey == "EnvironmentVariables"
			case e.Name.Local == "key" || e.Name.Local == "string":
				var s string
				if err := d.DecodeElement(&s, &e); err != nil {
					t.Fatal(err)
				}
				switch {
				case e.Name.Local == "key" && depth == 0:
					lastKey = s
				case e.Name.Local == "key" && inEnv:
					name = s
				case inEnv:
					env[name] = s
				}
			}
		case xml.EndElement:
			if e.Name.Local == "dict" {
				depth--
				inEnv = false
			}
		}
	}
	return env
}
