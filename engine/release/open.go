package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/untrusted"
)

// Format says which layout a model came in.
type Format string

// Formats.
const (
	FormatRelease     Format = "release"     // the bf16 release directory: sharded safetensors + head
	FormatMLX         Format = "mlx"         // an mlx-community 4/8-bit directory
	FormatGGUF        Format = "gguf"        // a GGUF backbone (with its companion when clef quantize wrote it)
	FormatSafetensors Format = "safetensors" // one .safetensors file with config.json beside it
)

// ErrNoConfig marks an error of Open or ReadConfig for a path that holds no
// model configuration at all (no config.json; a GGUF of another
// architecture): clef inspect then describes the file from its tensors.
// Every other error is about a model that is there and inconsistent.
var ErrNoConfig = errors.New("no model configuration")

// Release is a model opened from its files: the configuration and the
// mapped weights, tensors under their stored names (Lookup resolves a
// table row among them).
type Release struct {
	Path    string
	Format  Format
	Config  Config
	Weights weights.Model
	// Files holds the configuration files verbatim, by release file name
	// (ConfigFile, HeadConfigFile, ...), as read from the directory or the
	// companion's metadata; clef quantize copies them into a companion.
	Files map[string][]byte
	// Backbone is the GGUF backbone file (FormatGGUF), Companion its
	// companion (nil when there is none).
	Backbone, Companion *weights.GGUFFile
}

// CompanionPath returns the companion file clef quantize writes next to a
// backbone GGUF: FILE.gguf -> FILE.head.gguf. For a companion it returns the
// path unchanged.
func CompanionPath(path string) string {
	if strings.HasSuffix(path, CompanionExt) {
		return path
	}
	return strings.TrimSuffix(path, GGUFExt) + CompanionExt
}

// KeepThinker is the release's loading rule for its shards: thinker.* is
// used, talker.* and code2wav.* are skipped, anything else is an error.
func KeepThinker(name string) (bool, error) {
	switch {
	case strings.HasPrefix(name, ThinkerPrefix):
		return true, nil
	case strings.HasPrefix(name, TalkerPrefix), strings.HasPrefix(name, Code2WavPrefix):
		return false, nil
	}
	return false, fmt.Errorf("unexpected tensor outside %s*, %s* and %s*", ThinkerPrefix, TalkerPrefix, Code2WavPrefix)
}

// Open opens the model at path:
//
//   - a release directory (Cloudflare/clef-omni): config.json, sharded
//     safetensors (thinker.* used, talker.* and code2wav.* skipped, any
//     other prefix an error), joint_head.safetensors and
//     joint_head_config.json when present, the processor configuration;
//   - an MLX directory (config.json with a "quantization" entry);
//   - a .safetensors file, with the config.json beside it;
//   - a .gguf backbone: clef quantize's (its companion FILE.head.gguf holds
//     the head, the towers and the configuration files) or llama.cpp's
//     qwen3moe/qwen3vlmoe (decoder configuration from its metadata).
func Open(path string) (*Release, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	switch {
	case st.IsDir():
		return openDir(path)
	case strings.HasSuffix(path, CompanionExt):
		return nil, fmt.Errorf("release: %s is the companion file; give the backbone %s", path, strings.TrimSuffix(path, CompanionExt)+GGUFExt)
	case strings.HasSuffix(path, GGUFExt):
		return openGGUF(path)
	case strings.HasSuffix(path, ".safetensors"):
		files, err := readFiles(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		r := &Release{Path: path, Format: FormatSafetensors, Files: files}
		if err := r.parseFiles(filepath.Dir(path)); err != nil {
			return nil, err
		}
		if r.Weights, err = weights.Open(path, weights.Options{}); err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("release: %s: want a model directory, a .gguf or a .safetensors file", path)
}

// ReadConfig reads only the configuration of the model at path (as Open
// does, without mapping the weights).
func ReadConfig(path string) (Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Config{}, fmt.Errorf("release: %w", err)
	}
	if !st.IsDir() && strings.HasSuffix(path, GGUFExt) {
		r, err := Open(path)
		if err != nil {
			return Config{}, err
		}
		defer r.Close()
		return r.Config, nil
	}
	dir := path
	if !st.IsDir() {
		dir = filepath.Dir(path)
	}
	files, err := readFiles(dir)
	if err != nil {
		return Config{}, err
	}
	r := &Release{Path: path, Files: files}
	if err := r.parseFiles(dir); err != nil {
		return Config{}, err
	}
	return r.Config, nil
}

// readFiles reads the configuration files of dir that are present.
func readFiles(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, f := range ConfigFiles {
		b, err := os.ReadFile(filepath.Join(dir, f.File))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		files[f.File] = b
	}
	return files, nil
}

// parseFiles fills r.Config from r.Files; where names the files in errors.
func (r *Release) parseFiles(where string) error {
	cj, ok := r.Files[ConfigFile]
	if !ok {
		return fmt.Errorf("release: %s is not a model: %s is missing (%w)", where, ConfigFile, ErrNoConfig)
	}
	var err error
	if r.Config.Thinker, err = ParseThinker(cj); err != nil {
		return fmt.Errorf("release: %s: %w", where, err)
	}
	return r.parseParts(where)
}

// parseParts fills the head's and the processor's configuration from
// r.Files, when they are there.
func (r *Release) parseParts(where string) error {
	if hj, ok := r.Files[HeadConfigFile]; ok {
		h, err := ParseHead(hj)
		if err != nil {
			return fmt.Errorf("release: %s: %w", where, err)
		}
		r.Config.Head = &h
	}
	for _, f := range []string{ProcessorConfigFile, PreprocessorFile} {
		if pj, ok := r.Files[f]; ok {
			p, err := ParseProcessor(pj)
			if err != nil {
				return fmt.Errorf("release: %s: %s: %w", where, f, err)
			}
			r.Config.Processor = p
			break
		}
	}
	return nil
}

func openDir(dir string) (*Release, error) {
	files, err := readFiles(dir)
	if err != nil {
		return nil, err
	}
	r := &Release{Path: dir, Format: FormatRelease, Files: files}
	if err := r.parseFiles(dir); err != nil {
		return nil, err
	}
	var top struct {
		Quantization json.RawMessage `json:"quantization"`
	}
	if err := json.Unmarshal(files[ConfigFile], &top); err != nil {
		return nil, fmt.Errorf("release: %s: %w", filepath.Join(dir, ConfigFile), untrusted.Wrap(err))
	}
	o := weights.Options{Keep: KeepThinker}
	if hp := filepath.Join(dir, HeadWeightsFile); fileExists(hp) {
		o.Extra = []string{hp}
	}
	if top.Quantization != nil && string(top.Quantization) != "null" {
		r.Format, o.MLX = FormatMLX, top.Quantization
		// MLX conversions may drop the thinker. prefix.
		o.Keep = keepMLX
	}
	if r.Weights, err = weights.Open(dir, o); err != nil {
		return nil, err
	}
	return r, nil
}

// keepMLX skips the speech-output modules of an MLX conversion.
func keepMLX(name string) (bool, error) {
	return !strings.HasPrefix(name, TalkerPrefix) && !strings.HasPrefix(name, Code2WavPrefix), nil
}

func openGGUF(path string) (*Release, error) {
	var o weights.Options
	companion := CompanionPath(path)
	if fileExists(companion) {
		o.Extra = []string{companion}
	}
	m, err := weights.Open(path, o)
	if err != nil {
		return nil, err
	}
	set, ok := m.(*weights.Set)
	if !ok || len(set.GGUF) != 1+len(o.Extra) {
		m.Close()
		return nil, fmt.Errorf("release: %s: not a GGUF file", path)
	}
	r := &Release{Path: path, Format: FormatGGUF, Weights: m, Backbone: set.GGUF[0], Files: map[string][]byte{}}
	if len(o.Extra) > 0 {
		r.Companion = set.GGUF[1]
	}
	if err := r.parseGGUF(); err != nil {
		m.Close()
		return nil, err
	}
	return r, nil
}

// parseGGUF reads the configuration of a GGUF model: the companion's copy
// of the release files when there is one, the backbone's metadata for the
// decoder otherwise.
func (r *Release) parseGGUF() error {
	if c := r.Companion; c != nil {
		for _, f := range ConfigFiles {
			if v, ok := c.Get(f.Key); ok {
				s, ok := v.(string)
				if !ok {
					return fmt.Errorf("release: %s: metadata %s is %T, not a string", c.Path, f.Key, v)
				}
				r.Files[f.File] = []byte(s)
			}
		}
	}
	// The backbone's metadata describes its decoder, and its tensors must
	// have the shapes the metadata gives.
	text, err := TextFromGGUF(r.Backbone)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := checkTensors(r.Backbone, text); err != nil {
		return fmt.Errorf("release: %s: %w", r.Backbone.Path, err)
	}
	if _, ok := r.Files[ConfigFile]; ok {
		if err := r.parseFiles(r.Companion.Path); err != nil {
			return err
		}
		// The backbone's decoder must be the one the configuration describes.
		if err := sameDecoder(r.Config.Thinker.Text, text, r.Backbone); err != nil {
			return fmt.Errorf("release: %s does not match its companion %s: %w", r.Backbone.Path, r.Companion.Path, err)
		}
		return nil
	}
	// A llama.cpp GGUF, or a companion without the release's files (written
	// from one): the decoder's configuration is in the backbone's metadata.
	r.Config.Thinker = Thinker{Text: text, PositionIDPerSeconds: defaultPositionIDPerSeconds}
	if r.Companion == nil {
		return nil
	}
	return r.parseParts(r.Companion.Path)
}

// Tokenizer loads the model's tokenizer: tokenizer.json of a directory, the
// tokenizer.ggml.* metadata of a GGUF backbone.
func (r *Release) Tokenizer() (*tokenizer.Tokenizer, error) {
	if r.Backbone != nil {
		t, err := tokenizer.FromGGUF(r.Backbone)
		if err != nil {
			return nil, fmt.Errorf("release: %s: %w", r.Backbone.Path, err)
		}
		return t, nil
	}
	dir := r.Path
	if r.Format == FormatSafetensors {
		dir = filepath.Dir(dir)
	}
	return tokenizer.Load(filepath.Join(dir, TokenizerFile))
}

// Close unmaps the weights.
func (r *Release) Close() error {
	if r.Weights == nil {
		return nil
	}
	return r.Weights.Close()
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
