package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/spf13/cobra"
)

func init() {
	var (
		path, addedPath string
		jsonl, omni     bool
	)
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer PATH [TEXT...]",
		Short: "Print the token ids of each TEXT (or of stdin) as a JSON array",
		Long: `Tokenize prints one JSON array of token ids per TEXT, one per line, encoded
without special tokens (added tokens written in the text still become their
ids). Without TEXT it tokenizes all of stdin. With --jsonl it reads lines
{"text": "..."} from stdin and writes lines {"ids": [...]}.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if path == "" {
				return errors.New("tokenize: --tokenizer is required (a tokenizer.json or a directory holding one)")
			}
			tok, err := tokenizer.Load(path)
			if err != nil {
				return err
			}
			if omni {
				if err := tok.AddSpecialTokens(tokenizer.OmniAddedTokens); err != nil {
					return err
				}
			}
			if addedPath != "" {
				added, err := tokenizer.LoadAddedTokens(addedPath)
				if err != nil {
					return err
				}
				if err := tok.AddSpecialTokens(added); err != nil {
					return err
				}
			}
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 1<<16)
			defer out.Flush()
			switch {
			case jsonl:
				if len(args) > 0 {
					return errors.New("tokenize: --jsonl reads stdin and takes no TEXT")
				}
				err = tokenizeJSONL(tok, cmd.InOrStdin(), out)
			case len(args) == 0:
				var text []byte
				if text, err = io.ReadAll(cmd.InOrStdin()); err == nil {
					writeIDs(out, tok.Encode(string(text)))
					out.WriteByte('\n')
				}
			default:
				for _, a := range args {
					writeIDs(out, tok.Encode(a))
					out.WriteByte('\n')
				}
			}
			if err != nil {
				return err
			}
			return out.Flush()
		},
	}
	cmd.Flags().StringVar(&path, "tokenizer", "", "tokenizer.json, or a model directory holding it")
	cmd.Flags().BoolVar(&jsonl, "jsonl", false, `read lines {"text": ...} from stdin, write lines {"ids": [...]}`)
	cmd.Flags().BoolVar(&omni, "omni", false, "add the 7 Qwen3-Omni audio/TTS tokens (ids 151669-151675) if the tokenizer lacks them")
	cmd.Flags().StringVar(&addedPath, "added-tokens", "", "JSON file of added tokens to register (a list, or added_tokens / added_tokens_decoder)")
	rootCmd.AddCommand(cmd)
}

// tokenizeJSONL encodes each {"text": ...} line of in; blank lines are skipped.
func tokenizeJSONL(tok *tokenizer.Tokenizer, in io.Reader, out *bufio.Writer) error {
	r := bufio.NewReaderSize(in, 1<<16)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("tokenize: reading stdin: %w", err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var rec struct {
				Text *string `json:"text"`
			}
			if jerr := json.Unmarshal(trimmed, &rec); jerr != nil {
				return fmt.Errorf("tokenize: stdin line %d: %v", n, jerr)
			}
			if rec.Text == nil {
				return fmt.Errorf("tokenize: stdin line %d: no \"text\" string", n)
			}
			out.WriteString(`{"ids":`)
			writeIDs(out, tok.Encode(*rec.Text))
			out.WriteString("}\n")
		}
		if err == io.EOF {
			return nil
		}
	}
}

// writeIDs writes ids as a compact JSON array.
func writeIDs(w *bufio.Writer, ids []int) {
	var buf [20]byte
	w.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			w.WriteByte(',')
		}
		w.Write(strconv.AppendInt(buf[:0], int64(id), 10))
	}
	w.WriteByte(']')
}
