package video

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Find locates ffmpeg and ffprobe: the ffmpeg path given (a flag; ffprobe
// beside it), else $CLEF_FFMPEG (and $CLEF_FFPROBE), else PATH.
// $CLEF_FFPROBE, when set, names ffprobe in every case; otherwise ffprobe
// is looked for beside the ffmpeg found, then on PATH. Its error wraps
// ErrNoFFmpeg and says what to install.
func Find(ffmpeg string) (*Tools, error) {
	from := "the ffmpeg path given"
	if ffmpeg == "" {
		ffmpeg, from = os.Getenv("CLEF_FFMPEG"), "$CLEF_FFMPEG"
	}
	if ffmpeg == "" {
		ffmpeg, from = "ffmpeg", "PATH"
	}
	mpeg, err := exec.LookPath(ffmpeg)
	if err != nil {
		if from == "PATH" {
			return nil, notFound("ffmpeg is not on PATH")
		}
		return nil, notFound(fmt.Sprintf("ffmpeg %q (%s) is not an executable", ffmpeg, from))
	}
	probe, err := findProbe(mpeg)
	if err != nil {
		return nil, err
	}
	return &Tools{FFmpeg: mpeg, FFprobe: probe}, nil
}

// findProbe finds ffprobe for the ffmpeg at mpeg: $CLEF_FFPROBE, else the
// file beside it with "ffprobe" in place of "ffmpeg" in its name (so
// ffmpeg-6 pairs with ffprobe-6), else PATH.
func findProbe(mpeg string) (string, error) {
	if p := os.Getenv("CLEF_FFPROBE"); p != "" {
		probe, err := exec.LookPath(p)
		if err != nil {
			return "", notFound(fmt.Sprintf("ffprobe %q ($CLEF_FFPROBE) is not an executable", p))
		}
		return probe, nil
	}
	dir, base := filepath.Split(mpeg)
	name := "ffprobe"
	if i := strings.LastIndex(base, "ffmpeg"); i >= 0 {
		name = base[:i] + "ffprobe" + base[i+len("ffmpeg"):]
	}
	if probe, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
		return probe, nil
	}
	if probe, err := exec.LookPath("ffprobe"); err == nil {
		return probe, nil
	}
	return "", notFound(fmt.Sprintf("ffprobe is neither beside %s nor on PATH", mpeg))
}

// notFound is Find's error: what is missing, and what to install.
func notFound(what string) error {
	return fmt.Errorf("%w (ffmpeg and ffprobe): %s; %s, or name them with $CLEF_FFMPEG and $CLEF_FFPROBE",
		ErrNoFFmpeg, what, installHint())
}

// installHint says how to install FFmpeg on this system.
func installHint() string {
	switch runtime.GOOS {
	case "darwin":
		return "install it with `brew install ffmpeg`"
	case "linux":
		return "install it with `apt-get install ffmpeg` (Debian/Ubuntu) or your distribution's ffmpeg package"
	}
	return "install FFmpeg from ffmpeg.org"
}
