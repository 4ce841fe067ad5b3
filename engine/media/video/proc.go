package video

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// This file runs one ffmpeg or ffprobe process: its own process group
// (killed whole when its context ends), the input on stdin or from a file,
// stdout read by the caller, stderr split into lines as they come (each
// capped, a few of the last kept for messages), and the reasons a run can
// fail turned into this package's errors.

// waitDelay bounds how long Wait waits for the output pipes to close after
// the process was killed (a child holding them open cannot hang us).
const waitDelay = 5 * time.Second

// maxLineBytes caps one stderr line; the rest of a longer line is dropped.
const maxLineBytes = 2048

// keptLines is how many of stderr's last lines are kept for messages.
const keptLines = 8

// input is how a clip reaches the decoder: on stdin (pipe:0), or from a
// private file. On Unix that file is a copy of the clip made for each run,
// removed from its directory at once and handed to the process as file
// descriptor 3 (file:/dev/fd/3), so nothing is left behind whatever
// happens to us; elsewhere it is a temporary file the caller removes.
type input struct {
	data      []byte
	url       string // "pipe:0", "file:/dev/fd/3" or "file:<path>"
	whitelist string // -protocol_whitelist value
	format    string // demuxer forced with -f: "mov" or "matroska"
	fd        bool   // each run gets its own unlinked copy of data as descriptor 3
}

// args are the input options and the input, for ffmpeg and ffprobe alike:
// only the given protocols, the demuxer forced, an MP4's external data
// references never followed (-enable_drefs 0, the mov demuxer's default,
// stated), and no decoder allocating frames larger than maxSourcePixels
// (-max_pixels: a size that changes mid-stream is refused before any frame
// of that size is made).
func (in input) args() []string {
	a := []string{"-protocol_whitelist", in.whitelist, "-f", in.format}
	if in.format == "mov" {
		a = append(a, "-enable_drefs", "0")
	}
	return append(a, "-max_pixels", strconv.Itoa(maxSourcePixels), "-i", in.url)
}

// proc is one started process.
type proc struct {
	name   string // "ffmpeg" or "ffprobe", for messages
	cmd    *exec.Cmd
	stdout io.ReadCloser
	log    *stderrLog
	parent context.Context // the run's context (its own is parent's child)
	cancel context.CancelFunc
	in     input
}

// start runs path with args; line, when not nil, sees every stderr line.
func start(parent context.Context, name, path string, args []string, in input, line func(string)) (*proc, error) {
	ctx, cancel := context.WithCancel(parent)
	cmd := exec.CommandContext(ctx, path, args...)
	ownGroup(cmd)
	cmd.WaitDelay = waitDelay
	if in.url == "pipe:0" {
		cmd.Stdin = bytes.NewReader(in.data)
	}
	if in.fd {
		f, err := unlinkedCopy(in.data)
		if err != nil {
			cancel()
			return nil, err
		}
		// Once started, the process holds its own descriptor; when it
		// ends, the copy is gone.
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f}
	}
	p := &proc{name: name, cmd: cmd, log: &stderrLog{line: line}, parent: parent, cancel: cancel, in: in}
	cmd.Stderr = p.log
	var err error
	if p.stdout, err = cmd.StdoutPipe(); err != nil {
		cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, decoderError(fmt.Sprintf("cannot start %s: %v", name, err))
	}
	return p, nil
}

// wait waits for the process (the caller has read stdout, or stopped
// reading and called kill) and releases its context.
func (p *proc) wait() error {
	err := p.cmd.Wait()
	p.cancel()
	return err
}

// kill ends the process group now.
func (p *proc) kill() { p.cancel() }

// errTimedOut is the cause of the context of a decoding that ran past
// Options.Timeout.
var errTimedOut = errors.New("video decoding timed out")

// failure turns a run's error into this package's: past the time limit or
// killed by a signal, ErrDecoder; a container ffmpeg cannot read,
// ErrCorrupt; any other failing exit, ErrDecoder with ffmpeg's last
// message. The parent context's own end is returned as itself.
func (p *proc) failure(err error, limit time.Duration) error {
	if p.parent.Err() != nil {
		return ended(p.parent, limit, p.name)
	}
	last := p.lastLine()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return decoderError(fmt.Sprintf("%s failed: %v", p.name, err))
	}
	if ee.ExitCode() < 0 { // killed by a signal
		msg := fmt.Sprintf("%s crashed (%s)", p.name, ee.ProcessState)
		if last != "" {
			msg += "; its last message: " + last
		}
		return decoderError(msg)
	}
	if unreadable(last) {
		return corrupt(fmt.Sprintf("%s cannot read the video: %s", p.name, last))
	}
	if last == "" {
		last = "no message"
	}
	return decoderError(fmt.Sprintf("%s failed (%s): %s", p.name, ee.ProcessState, last))
}

// ended is the error of a decoding whose context has ended: past the time
// limit, ErrDecoder saying which process was killed; the caller's context
// ending, its cause.
func ended(ctx context.Context, limit time.Duration, name string) error {
	if cause := context.Cause(ctx); cause != errTimedOut {
		return cause
	}
	return decoderError(fmt.Sprintf("decoding ran past its %v limit; %s was killed", limit, name))
}

// hard reports whether a run's error is more than ffmpeg refusing its
// input: the time limit, the context's end, a crash, or no exit status.
func (p *proc) hard(err error) bool {
	var ee *exec.ExitError
	return p.parent.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() < 0
}

// unreadable reports whether ffmpeg's message says the input itself cannot
// be read (rather than that ffmpeg failed).
func unreadable(msg string) bool {
	for _, s := range []string{"Invalid data found", "moov atom not found", "EBML header parsing failed", "partial file", "End of file"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// addrRe matches the context addresses in ffmpeg's log prefixes
// ("[mov,mp4,m4a,3gp,3g2,mj2 @ 0x55d0c0a4b2c0] ").
var addrRe = regexp.MustCompile(` @ 0x[0-9a-fA-F]+\]`)

// lastLine is the last line of stderr that says something (ffmpeg's final
// "Conversion failed!" says nothing new), without log addresses or the
// input's URL (a temporary file's path is nobody's business).
func (p *proc) lastLine() string {
	lines := p.log.last()
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || l == "Conversion failed!" || strings.HasPrefix(l, "[showinfo@") {
			continue
		}
		l = addrRe.ReplaceAllString(l, "]")
		l = strings.ReplaceAll(l, p.in.url+": ", "")
		l = strings.ReplaceAll(l, p.in.url, "the input")
		return l
	}
	return ""
}

// stderrLog splits what a process writes to stderr into lines (at \n or
// \r), passes each to line and keeps the last few; memory stays bounded
// however much is written.
type stderrLog struct {
	line    func(string)
	partial []byte
	over    bool // the current line passed maxLineBytes
	ring    [keptLines]string
	n       int
}

func (l *stderrLog) Write(b []byte) (int, error) {
	for _, c := range b {
		if c == '\n' || c == '\r' {
			l.flush()
			continue
		}
		if len(l.partial) < maxLineBytes {
			l.partial = append(l.partial, c)
		} else {
			l.over = true
		}
	}
	return len(b), nil
}

// flush ends the current line.
func (l *stderrLog) flush() {
	if len(l.partial) == 0 && !l.over {
		return
	}
	s := string(l.partial)
	l.partial, l.over = l.partial[:0], false
	if l.line != nil {
		l.line(s)
	}
	l.ring[l.n%keptLines] = s
	l.n++
}

// last returns the kept lines, oldest first (a line not yet ended too).
func (l *stderrLog) last() []string {
	l.flush()
	var out []string
	for i := max(0, l.n-keptLines); i < l.n; i++ {
		out = append(out, l.ring[i%keptLines])
	}
	return out
}
