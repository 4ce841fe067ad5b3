package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/pyjson"
	"github.com/clefrt/clef/engine/tinymodel"
)

// Exit codes of clef decide (and clef demo).
const (
	exitBadRequest = 2 // the request was refused (invalid JSON, failed checks, too long)
	exitEscalate   = 3 // some answer is below --min-confidence
)

// maxRequestBytes bounds what clef decide reads as one request.
const maxRequestBytes = 1 << 30

// decideFlags are the flags shared by clef decide and clef demo.
type decideFlags struct {
	model         string
	maxLength     int
	format        string
	minConfidence float64
	backend       string
	threads       int
	strict        bool
	images, audio []string // local files to attach
	videos        []string // local video files to attach
	ffmpeg        string   // the ffmpeg executable that decodes videos
}

// ffmpegHelp is the help of every command's --ffmpeg flag.
const ffmpegHelp = "ffmpeg executable that decodes videos, ffprobe beside it (default $CLEF_FFMPEG, then PATH); without one, videos are refused and everything else works"

func (f *decideFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model: a Clef-Omni release directory or a GGUF file from clef quantize (default $CLEF_MODEL, else the embedded synthetic tiny model)")
	fl.IntVar(&f.maxLength, "max-length", engine.DefaultMaxLength, "token budget of the record; only the state is truncated to fit")
	fl.StringVar(&f.format, "format", "json", "output: json (the SystemOne response) or table")
	fl.Float64Var(&f.minConfidence, "min-confidence", 0, "mark answers whose confidence (noul: max(p, 1-p)) is below P as escalate, and exit 3")
	fl.StringVar(&f.backend, "backend", "", "compute backend (cpu, metal); default: the best available")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fl.BoolVar(&f.strict, "strict", false, "also apply the hosted Workers AI limits to the request")
	fl.StringArrayVar(&f.images, "image", nil, "attach a local PNG, JPEG or WebP file to the request's images (repeatable; after any the request carries)")
	fl.StringArrayVar(&f.audio, "audio", nil, "attach a local WAV or MP3 file to the request's audio (repeatable; after any the request carries)")
	fl.StringArrayVar(&f.videos, "video", nil, "attach a local MP4, MOV or WebM video to the request's videos (repeatable, at most 2; after any the request carries); its soundtrack is heard when every video has one; needs ffmpeg")
	fl.StringVar(&f.ffmpeg, "ffmpeg", "", ffmpegHelp)
}

// attach adds the files of --image, --audio and --video to req as
// {content_type, base64} items, the content type named from the bytes (a
// video's from its extension when the bytes do not say).
func (f *decideFlags) attach(req *api.Request) error {
	if n := len(f.videos); n > api.MaxVideos {
		return &exitError{exitBadRequest, fmt.Errorf("--video: at most %d videos, got %d", api.MaxVideos, n)}
	}
	for _, a := range []struct {
		field string
		files []string
	}{{"images", f.images}, {"audio", f.audio}, {"videos", f.videos}} {
		for _, name := range a.files {
			data, err := readMediaFile(name)
			if err != nil {
				return err
			}
			ct := mediaType(a.field, data)
			if a.field == "videos" {
				ct = videoType(name, data)
			}
			if err := req.AddMedia(a.field, ct, data); err != nil {
				return &exitError{exitBadRequest, fmt.Errorf("--%s %s: %w", strings.TrimSuffix(a.field, "s"), name, err)}
			}
		}
	}
	return nil
}

// maxMediaFile bounds a file attached with --image, --audio or --video
// (the hosted limits are smaller; the engine names the item that is over
// them).
const maxMediaFile = 64 << 20

// readMediaFile reads a file for --image, --audio or --video.
func readMediaFile(name string) ([]byte, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, &exitError{exitBadRequest, err}
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxMediaFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > maxMediaFile {
		return nil, &exitError{exitBadRequest, fmt.Errorf("%s: larger than %d MiB", name, maxMediaFile>>20)}
	}
	return data, nil
}

// mediaType names the content type of an attached file from its bytes
// (the engine decodes what the bytes are, whatever the type says).
func mediaType(field string, data []byte) string {
	if field == "images" {
		if f := media.ImageFormat(data); f != "" {
			return "image/" + f
		}
		return "image/unknown"
	}
	switch media.AudioFormat(data) {
	case "wav":
		return "audio/wav"
	case "mp3":
		return "audio/mpeg"
	}
	return "audio/unknown"
}

// videoType names the content type of an attached video: from its
// container when our probe knows it, else from the file's extension (.mp4,
// .m4v and .mov are ISO BMFF, video/mp4; .webm is video/webm). The engine
// decodes what the bytes are, whatever the type says.
func videoType(name string, data []byte) string {
	if c, err := video.Probe(data); err == nil && c.Format != "" {
		return "video/" + c.Format
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".mp4", ".m4v", ".mov":
		return "video/mp4"
	case ".webm":
		return "video/webm"
	}
	return "video/unknown"
}

func init() {
	var f decideFlags
	cmd := &cobra.Command{
		Use:   "decide [REQUEST.json|-]",
		Short: "Answer one SystemOne request (from a file, or stdin)",
		Long: `Answer one SystemOne request: probabilities for every option of every question
from a single forward pass. The request is read from the file given, or from
stdin when it is "-" or absent. JSON output is the SystemOne response.

Exit codes: 0 answered, 1 runtime error, 2 request refused, 3 some answer is
below --min-confidence (marked escalate).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			input := "-"
			if len(args) == 1 {
				input = args[0]
			}
			body, err := readRequest(cmd.InOrStdin(), input)
			if err != nil {
				return err
			}
			return runDecide(cmd, &f, body, false)
		},
	}
	f.register(cmd)
	rootCmd.AddCommand(cmd)
}

// runDecide loads the model, answers the request body and prints it. With
// stats it also prints the time per stage (clef demo).
func runDecide(cmd *cobra.Command, f *decideFlags, body []byte, stats bool) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if f.format != "json" && f.format != "table" {
		return fmt.Errorf("--format must be json or table, got %q", f.format)
	}
	if f.minConfidence < 0 || f.minConfidence > 1 || math.IsNaN(f.minConfidence) {
		return fmt.Errorf("--min-confidence must be between 0 and 1, got %v", f.minConfidence)
	}
	if f.maxLength <= 0 {
		return fmt.Errorf("--max-length must be positive, got %d", f.maxLength)
	}
	req, err := api.ParseRequest(body)
	if err != nil {
		return &exitError{exitBadRequest, err}
	}
	if err := f.attach(req); err != nil {
		return err
	}

	path, synthetic, cleanup, err := resolveModel(f.model)
	if err != nil {
		return err
	}
	defer cleanup()
	if synthetic && f.format != "table" {
		fmt.Fprintln(errOut, "clef: note:", tinymodel.Warning)
	}
	loadStart := time.Now()
	e, err := engine.Open(path, engine.Options{Backend: f.backend, Threads: f.threads, MaxLength: f.maxLength, Strict: f.strict, FFmpeg: f.ffmpeg})
	if err != nil {
		return err
	}
	defer e.Close()
	load := time.Since(loadStart)

	resp, st, err := e.Decide(context.Background(), req)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return &exitError{exitBadRequest, fmt.Errorf("request refused (%d): %w", ae.Status, err)}
		}
		return err
	}
	escalate := escalations(resp, f.minConfidence)
	switch f.format {
	case "json":
		data, err := responseJSON(resp, escalate)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\n", data)
	case "table":
		name := path
		if synthetic {
			name = tinymodel.Name
		}
		writeTable(out, resp, escalate, name, e.Backend())
	}
	if stats || f.format == "table" {
		fmt.Fprintf(out, "time: load %s · encode %s · thinker %s · head %s · decide total %s (%d input tokens, backend %s)\n",
			ms(load), ms(st.Encode), ms(st.Thinker), ms(st.Head), ms(st.Total), st.InputTokens, e.Backend())
	}
	if st.StateTruncated {
		fmt.Fprintf(errOut, "clef: note: the state was truncated to %d tokens to fit --max-length %d\n", st.StateTokens, f.maxLength)
	}
	if synthetic && f.format == "table" {
		fmt.Fprintln(out, "note:", tinymodel.Warning)
	}
	if n := len(escalate); n > 0 {
		return &exitError{exitEscalate, fmt.Errorf("%d answer(s) below --min-confidence %v: escalate", n, f.minConfidence)}
	}
	return nil
}

// readRequest reads the request body from a file, or stdin for "-".
func readRequest(stdin io.Reader, input string) ([]byte, error) {
	r := stdin
	name := "stdin"
	if input != "-" {
		fh, err := os.Open(input)
		if err != nil {
			return nil, err
		}
		defer fh.Close()
		r, name = fh, input
	}
	body, err := io.ReadAll(io.LimitReader(r, maxRequestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(body) > maxRequestBytes {
		return nil, &exitError{exitBadRequest, fmt.Errorf("%s: request larger than %d bytes", name, maxRequestBytes)}
	}
	return body, nil
}

// resolveModel picks the model: --model, else $CLEF_MODEL (a path, or a Hub
// name resolved through the cache: modelPath), else the embedded synthetic
// tiny model written to a temporary directory.
func resolveModel(flag string) (path string, synthetic bool, cleanup func(), err error) {
	if flag == "" {
		flag = os.Getenv("CLEF_MODEL")
	}
	if flag != "" {
		p, err := modelPath(flag)
		return p, false, func() {}, err
	}
	dir, cleanup, err := tinymodel.WriteDir()
	if err != nil {
		return "", false, nil, err
	}
	return dir, true, cleanup, nil
}

// confidence is an answer's confidence: the reported one for choice and
// score, max(p, 1-p) for noul.
func confidence(a *api.Decision) float64 {
	if a.Type == api.Noul {
		return math.Max(a.Noul, 1-a.Noul)
	}
	return a.Confidence
}

// escalations returns the ids of the answers below min (none when min is 0).
func escalations(resp *api.Response, min float64) map[string]bool {
	out := map[string]bool{}
	if min <= 0 {
		return out
	}
	for i := range resp.Answers {
		if confidence(&resp.Answers[i]) < min {
			out[resp.Answers[i].ID] = true
		}
	}
	return out
}

// responseJSON is the SystemOne response as the reference writes it, with
// "escalate": true added to the answers below --min-confidence.
func responseJSON(resp *api.Response, escalate map[string]bool) ([]byte, error) {
	data, _ := resp.MarshalJSON()
	if len(escalate) == 0 {
		return data, nil
	}
	doc, err := pyjson.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("re-reading the response: %w", err)
	}
	answers := doc.Get("answers")
	for i, id := range answers.Keys {
		if escalate[id] {
			a := answers.Vals[i]
			a.Keys = append(a.Keys, "escalate")
			a.Vals = append(a.Vals, &pyjson.Value{Kind: pyjson.Bool, Bool: true})
		}
	}
	return pyjson.Append(nil, doc, pyjson.Default), nil
}

// barWidth is the width of a probability bar in the table.
const barWidth = 30

// writeTable prints each question with its options, probability bars and the
// answer.
func writeTable(w io.Writer, resp *api.Response, escalate map[string]bool, model, backend string) {
	fmt.Fprintf(w, "model %s · backend %s · %d input tokens\n", model, backend, resp.Usage.InputTokens)
	for i := range resp.Answers {
		a := &resp.Answers[i]
		var verdict string
		var rows []api.Prob
		labels := map[string]string{}
		switch a.Type {
		case api.Noul:
			verdict = "false"
			if a.Noul >= 0.5 {
				verdict = "true"
			}
			verdict = fmt.Sprintf("%s   (p(true) %.4f)", verdict, a.Noul)
			rows = []api.Prob{{Key: "true", P: a.Noul}, {Key: "false", P: pyjson.Round(1-a.Noul, 4)}}
		case api.Choice:
			verdict = fmt.Sprintf("%s   (confidence %.4f)", a.Choice, a.Confidence)
			rows = a.Probabilities
		case api.Score:
			verdict = fmt.Sprintf("%.4f   (confidence %.4f)", a.Score, a.Confidence)
			rows = a.Probabilities
			for _, l := range a.Legend {
				labels[l.Key] = l.Key + " " + clip(pyjson.Render(l.Value), 24)
			}
		}
		mark := ""
		if escalate[a.ID] {
			mark = "   ESCALATE"
		}
		fmt.Fprintf(w, "\n%s (%s) → %s%s\n", a.ID, a.Type, verdict, mark)
		width := 0
		for _, r := range rows {
			if l, ok := labels[r.Key]; ok {
				r.Key = l
			}
			width = max(width, utf8.RuneCountInString(clip(r.Key, 32)))
		}
		for _, r := range rows {
			label := r.Key
			if l, ok := labels[r.Key]; ok {
				label = l
			}
			label = clip(label, 32)
			pad := strings.Repeat(" ", width-utf8.RuneCountInString(label))
			fmt.Fprintf(w, "  %s%s  %s  %.4f\n", label, pad, bar(r.P), r.P)
		}
	}
	fmt.Fprintln(w)
}

// bar draws p in [0, 1] as a bar of barWidth cells.
func bar(p float64) string {
	n := int(math.Round(math.Max(0, math.Min(1, p)) * barWidth))
	return strings.Repeat("█", n) + strings.Repeat("░", barWidth-n)
}

// clip shortens s to at most n runes.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", d.Seconds()*1000)
}
