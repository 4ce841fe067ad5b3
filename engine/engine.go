// Package engine answers Clef decisions: Open loads a Clef-Omni model (the
// official release directory, or the GGUF pair written by clef quantize) on a
// backend, and Decide turns one SystemOne request into its response, as
// Cloudflare's reference systemone() does: validate, encode the record, run
// the thinker on it alone, run the joint schema head, softmax per question in
// float32, map the probabilities to answers.
//
// The engine holds no HTTP, CLI or backend-specific code: backends are chosen
// by name through the engine/backend registry.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/backend"
	_ "github.com/clefrt/clef/engine/cpu" // the CPU backend is always available
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/model/schemahead"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/clefrt/clef/engine/weights"
)

// DefaultMaxLength is the reference's DEFAULT_MAX_LENGTH: the token budget of
// one record; only the state is truncated to fit it.
const DefaultMaxLength = 64000

// Options configure Open.
type Options struct {
	// Backend names the compute backend ("cpu", "metal"); "" picks the best
	// registered one (metal when present, else cpu).
	Backend string
	// Threads is the CPU backend's worker count; 0 means all cores.
	Threads int
	// MaxLength is the token budget of a record; 0 means DefaultMaxLength.
	MaxLength int
	// Strict applies the hosted Workers AI limits (api ValidateHosted: counts,
	// id patterns, unknown fields) on top of the reference's checks.
	Strict bool
	// PrefixCache, when set, keeps the thinker's keys, values and hidden
	// rows of every record's prefix (system prompt, media, state: all that
	// comes before the schema), so a record with a cached prefix runs only
	// its schema tokens. *server.PrefixCache implements it; nil disables
	// reuse, and so does a store whose Enabled method reports false.
	PrefixCache PrefixStore
}

// PrefixStore is a cache of prefixes keyed by a content hash; values are
// *qwen3moe.Prefix and size is what they hold in bytes. It must be safe for
// concurrent use; values it returns are only read. A store may also have
// Enabled() bool (false: not used) and MaxBytes() int64 (a prefix larger
// than that is neither looked up nor kept back from the backend).
type PrefixStore interface {
	Get(key [32]byte) (any, bool)
	Put(key [32]byte, val any, size int64) bool
}

// Stats describes one Decide call.
type Stats struct {
	Encode   time.Duration // validation, tokenization and record encoding
	Backbone time.Duration // the thinker forward
	Head     time.Duration // the joint schema head and softmax
	Total    time.Duration
	// InputTokens is the record's length (usage.input_tokens).
	InputTokens int
	// StateTokens is how many state tokens were kept; StateTruncated whether
	// the state was cut to fit MaxLength.
	StateTokens    int
	StateTruncated bool
	// PrefixHit tells whether the record's prefix came from the prefix
	// cache, CachedTokens how many tokens it held (0 on a miss).
	PrefixHit    bool
	CachedTokens int
}

// Engine is a loaded model. Decide may be called from several goroutines;
// records run one at a time, as the reference runs them.
type Engine struct {
	opts    Options
	backend backend.Backend
	weights weights.Model
	tok     *tokenizer.Tokenizer
	thinker *qwen3moe.Model
	head    *schemahead.Head
	lex     schemahead.Lexicon
	mu      sync.Mutex
	// ident names the model in prefix cache keys; prefixLen is the token
	// count of the record prefix (record.Prefix) before the media and state.
	ident     string
	prefixLen int
	// headOnBackend tells whether the head's large products run on the
	// backend (schemahead.Head.Bind succeeded).
	headOnBackend bool
}

// Release-directory files the engine needs besides the weight shards.
const (
	configFile    = "config.json"
	tokenizerFile = "tokenizer.json"
	lmHeadName    = "thinker.lm_head.weight"
)

// Open loads the model at path: a release directory (config.json, the
// sharded safetensors and their index, joint_head.safetensors,
// joint_head_config.json, tokenizer.json) or a GGUF file from clef quantize
// with its companions.
func Open(path string, opts Options) (*Engine, error) {
	if opts.MaxLength < 0 {
		return nil, fmt.Errorf("engine: max length must be positive, got %d", opts.MaxLength)
	}
	if opts.MaxLength == 0 {
		opts.MaxLength = DefaultMaxLength
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("engine: model: %w", err)
	}
	if !st.IsDir() {
		e, err := openGGUF(path, opts)
		if err != nil {
			return nil, err
		}
		e.identify(path)
		return e, nil
	}
	for _, f := range []string{configFile, schemahead.ConfigFile, schemahead.WeightsFile, tokenizerFile} {
		if _, err := os.Stat(filepath.Join(path, f)); err != nil {
			return nil, fmt.Errorf("engine: %s is not a Clef-Omni release: %s is missing", path, f)
		}
	}
	cfgData, err := os.ReadFile(filepath.Join(path, configFile))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	tcfg, err := qwen3moe.ParseConfig(cfgData)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", filepath.Join(path, configFile), err)
	}
	hcfg, err := schemahead.LoadConfig(filepath.Join(path, schemahead.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	tok, err := tokenizer.Load(filepath.Join(path, tokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	m, err := weights.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e, err := assemble(m, tcfg, hcfg, tok, opts)
	if err != nil {
		m.Close()
		return nil, err
	}
	e.identify(path)
	return e, nil
}

// identify sets what prefix cache keys hold of the model: its path, file
// size and time, configuration and backend (the keys and values depend on
// all of them), and the record prefix's token count.
func (e *Engine) identify(path string) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	var stamp string
	if st, err := os.Stat(path); err == nil {
		stamp = fmt.Sprintf("%d/%d", st.Size(), st.ModTime().UnixNano())
	}
	e.ident = fmt.Sprintf("clef prefix v1\x00%s\x00%s\x00%+v\x00%s", path, stamp, e.thinker.Config, e.backend.Name())
	e.prefixLen = len(e.tok.Encode(record.Prefix))
}

// assemble checks that the parts fit together and binds them on a backend.
func assemble(m weights.Model, tcfg qwen3moe.Config, hcfg schemahead.Config, tok *tokenizer.Tokenizer, opts Options) (*Engine, error) {
	if hcfg.HiddenSize != tcfg.Hidden {
		return nil, fmt.Errorf("engine: the joint head's hidden_size %d does not match the backbone's hidden size %d", hcfg.HiddenSize, tcfg.Hidden)
	}
	lm, err := m.Tensor(lmHeadName)
	if err != nil {
		return nil, fmt.Errorf("engine: the lexical prior needs %s: %w", lmHeadName, err)
	}
	if len(lm.Shape) != 2 || lm.Shape[1] != tcfg.Hidden {
		return nil, fmt.Errorf("engine: %s has shape %v, want [vocab, %d]", lmHeadName, lm.Shape, tcfg.Hidden)
	}
	vocab := lm.Shape[0]
	if tcfg.Vocab > 0 {
		vocab = min(vocab, tcfg.Vocab)
	}
	if tok.VocabSize() > vocab {
		return nil, fmt.Errorf("engine: the tokenizer has %d tokens but the model's embedding has %d rows: wrong tokenizer for this model", tok.VocabSize(), vocab)
	}
	head, err := schemahead.Load(m, hcfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	b, err := openBackend(opts)
	if err != nil {
		return nil, err
	}
	thinker, err := qwen3moe.Load(m, tcfg, b)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	// The head's products over the record's tokens run on the backend when
	// it passes Bind's check; otherwise they stay in Go (slower, same result).
	headOnBackend := head.BindAll(b) == nil
	return &Engine{headOnBackend: headOnBackend, opts: opts, backend: b, weights: m, tok: tok, thinker: thinker, head: head, lex: schemahead.TensorLexicon(lm)}, nil
}

// openBackend opens the named backend, or the best registered one.
func openBackend(opts Options) (backend.Backend, error) {
	bo := backend.Options{Threads: opts.Threads}
	if opts.Backend != "" {
		b, err := backend.Open(opts.Backend, bo)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		return b, nil
	}
	for _, name := range []string{"metal", "cpu"} {
		if !registered(name) {
			continue
		}
		if b, err := backend.Open(name, bo); err == nil {
			return b, nil
		} else if name == "cpu" {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	return nil, fmt.Errorf("engine: no backend available (registered: %v)", backend.Names())
}

func registered(name string) bool {
	for _, n := range backend.Names() {
		if n == name {
			return true
		}
	}
	return false
}

// Backend returns the name of the backend the engine runs on.
func (e *Engine) Backend() string { return e.backend.Name() }

// HeadOnBackend reports whether the joint head's large products run on the
// backend (true) or in Go.
func (e *Engine) HeadOnBackend() bool { return e.headOnBackend }

// Tokenizer returns the model's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// HeadConfig returns the joint head's configuration.
func (e *Engine) HeadConfig() schemahead.Config { return e.head.Config() }

// ThinkerConfig returns the text decoder's configuration.
func (e *Engine) ThinkerConfig() qwen3moe.Config { return e.thinker.Config }

// Close releases the backend and unmaps the weights.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.backend.Close()
	if werr := e.weights.Close(); err == nil {
		err = werr
	}
	return err
}

// Decide answers one request. Request errors are *api.Error (400, 413, 422);
// anything else is a failure of the runtime.
func (e *Engine) Decide(ctx context.Context, req *api.Request) (*api.Response, *Stats, error) {
	d, err := e.decide(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return d.resp, d.stats, nil
}

// decision is everything one decide call produced (tests read all of it).
type decision struct {
	enc   *api.Encoded
	probs [][]float32 // per question, encoded option order
	resp  *api.Response
	stats *Stats
}

func (e *Engine) decide(ctx context.Context, req *api.Request) (*decision, error) {
	start := time.Now()
	st := &Stats{}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if e.opts.Strict {
		if err := req.ValidateHosted(); err != nil {
			return nil, err
		}
	}
	if err := req.RefuseMedia(); err != nil {
		return nil, err
	}
	enc, err := record.Encode(e.tok, req, e.opts.MaxLength)
	if err != nil {
		return nil, err
	}
	st.Encode = time.Since(start)
	st.InputTokens, st.StateTokens, st.StateTruncated = len(enc.InputIDs), enc.StateTokens, enc.StateTruncated

	e.mu.Lock()
	defer e.mu.Unlock()
	t := time.Now()
	hidden, err := e.backbone(ctx, enc, st)
	if err != nil {
		return nil, fmt.Errorf("engine: thinker: %w", err)
	}
	st.Backbone = time.Since(t)

	t = time.Now()
	qs := make([]schemahead.Question, len(enc.Questions))
	for i, q := range enc.Questions {
		qs[i] = schemahead.Question{Type: q.Type, Span: q.Span, OptionSpans: q.OptionSpans}
	}
	logits, err := e.head.Logits(hidden, enc.InputIDs, qs, e.lex)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	probs := make([][]float32, len(logits))
	for i, l := range logits {
		probs[i] = schemahead.Softmax(l)
	}
	if err := api.CheckProbs(enc, probs); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	resp := api.Answer(req, enc, probs)
	st.Head = time.Since(t)
	st.Total = time.Since(start)
	return &decision{enc: enc, probs: probs, resp: resp, stats: st}, nil
}

// backbone runs the thinker on the record and returns the hidden state of
// every position. With a prefix cache, the prefix (everything before the
// schema) is looked up by content: on a hit only the rest runs, after the
// stored keys and values; on a miss the whole record runs and the prefix
// is stored.
func (e *Engine) backbone(ctx context.Context, enc *api.Encoded, st *Stats) ([]float32, error) {
	store := e.opts.PrefixCache
	if en, ok := store.(interface{ Enabled() bool }); ok && !en.Enabled() {
		store = nil
	}
	// The schema starts after the record prefix and the state (text records:
	// no media); it is never empty, so P < len(InputIDs).
	P := e.prefixLen + enc.StateTokens
	if store == nil || !e.thinker.CanResume() || P <= 0 || P >= len(enc.InputIDs) {
		return e.thinker.Hidden(ctx, enc.InputIDs, nil)
	}
	if mb, ok := store.(interface{ MaxBytes() int64 }); ok && e.thinker.PrefixBytes(P) > mb.MaxBytes() {
		// It could never be stored: do not read the keys and values back.
		return e.thinker.Hidden(ctx, enc.InputIDs, nil)
	}
	key := e.prefixKey(enc.InputIDs[:P])
	if v, ok := store.Get(key); ok {
		if pre, ok := v.(*qwen3moe.Prefix); ok && pre.Len == P {
			rest, _, err := e.thinker.HiddenPrefix(ctx, qwen3moe.Input{IDs: enc.InputIDs[P:], Past: pre}, 0)
			if err != nil {
				return nil, err
			}
			st.PrefixHit, st.CachedTokens = true, P
			hidden := make([]float32, 0, len(pre.Hidden)+len(rest))
			return append(append(hidden, pre.Hidden...), rest...), nil
		}
	}
	hidden, pre, err := e.thinker.HiddenPrefix(ctx, qwen3moe.Input{IDs: enc.InputIDs}, P)
	if err != nil {
		return nil, err
	}
	store.Put(key, pre, pre.Bytes())
	return hidden, nil
}

// prefixKey is the SHA-256 of the model's identity and the prefix's ids.
func (e *Engine) prefixKey(ids []int) [32]byte {
	h := sha256.New()
	h.Write([]byte(e.ident))
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(len(ids)))
	h.Write(buf[:])
	for _, id := range ids {
		binary.LittleEndian.PutUint32(buf[:4], uint32(id))
		h.Write(buf[:4])
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// truthy reports whether a media field holds anything, as Python's
// `record.get(field) or []` sees it.
// IsRequestError reports whether err is a refusal of the request (an
// *api.Error) rather than a failure of the runtime.
func IsRequestError(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae)
}
