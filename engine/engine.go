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
	"strings"
	"sync"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/model/omni"
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/model/schemahead"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
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
	// AudioFullAttention makes the audio tower attend over each whole clip
	// instead of its 104-token windows (what transformers 4.57 computed on
	// eager/sdpa attention), for comparing with those older outputs; the
	// windows are what the model was trained with.
	AudioFullAttention bool
	// FFmpeg is the ffmpeg executable that decodes videos (ffprobe beside
	// it); "" looks at $CLEF_FFMPEG, then PATH. Without one, a video is
	// refused with a 422 saying what to install; everything else works.
	FFmpeg string
}

// Prefix is the thinker's stored state of a record's prefix (keys and
// values of every layer, final hidden rows).
type Prefix = qwen3moe.Prefix

// PrefixStore is a cache of prefixes keyed by a content hash, size in bytes
// (Prefix.Bytes: the memory a prefix really holds). It must be safe for
// concurrent use; prefixes it returns are only read, each read bracketed by
// Prefix.Acquire and Release (a prefix the store evicted meanwhile fails
// Acquire and counts as a miss). Put hands the store the engine's reference
// to the prefix: the store calls Release when it drops it, at once when it
// does not keep it. *server.PrefixCache implements it.
type PrefixStore interface {
	Get(key [32]byte) (*Prefix, bool)
	Put(key [32]byte, val *Prefix, size int64) bool
	// Contains reports whether key is cached without counting a lookup
	// (for Estimate).
	Contains(key [32]byte) bool
	// Enabled reports whether the store may hold anything (false: unused).
	Enabled() bool
	// MaxBytes is the largest prefix worth building: a larger one is
	// neither looked up nor kept back from the backend.
	MaxBytes() int64
}

// Stats describes one Decide call.
type Stats struct {
	Encode    time.Duration // validation, tokenization and record encoding
	Decode    time.Duration // decoding the media (images, audio, videos)
	Processor time.Duration // the image and video processors and the log-mel
	Thinker   time.Duration // the thinker forward: towers and decoder
	Towers    time.Duration // of Thinker: the vision and audio towers and the composition
	Head      time.Duration // the joint schema head and softmax
	Total     time.Duration
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
	decoder *qwen3moe.Model
	towers  towers
	tokens  release.Tokens // the thinker's special token ids
	head    *schemahead.Head
	lex     schemahead.Lexicon
	mu      sync.Mutex
	// ident names the model in prefix cache keys; prefixLen is the token
	// count of the record prefix (record.Prefix) before the media and state.
	ident     string
	prefixLen int
	// speed is the engine's measured compute time, for Estimate.
	speed speed
	// ffmpeg is the video decoder's executables, found at the first video.
	ffmpeg ffmpegTools
}

// Open loads the model at path: a release directory (config.json, the
// sharded safetensors and their index, joint_head.safetensors,
// joint_head_config.json, tokenizer.json) or a GGUF file from clef quantize
// with its companion (see release.Open).
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
	if st.IsDir() {
		for _, f := range []string{release.ConfigFile, release.HeadConfigFile, release.HeadWeightsFile, release.TokenizerFile} {
			if _, err := os.Stat(filepath.Join(path, f)); err != nil {
				return nil, fmt.Errorf("engine: %s is not a Clef-Omni release: %s is missing", path, f)
			}
		}
	} else if !strings.HasSuffix(path, release.GGUFExt) {
		return nil, fmt.Errorf("engine: %s: want a release directory or a .gguf file from clef quantize", path)
	}
	r, err := release.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e, err := assemble(r, opts)
	if err != nil {
		r.Close()
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
	e.ident = fmt.Sprintf("clef prefix v3\x00%s\x00%s\x00%+v\x00%s\x00%+v\x00%v", path, stamp, e.decoder.Config, e.backend.Name(),
		e.towers.settings, e.towers.audioAttention.FullAttention)
	e.prefixLen = len(e.tok.Encode(record.Prefix))
}

// assemble checks that the parts of a release fit together and binds them
// on a backend.
func assemble(r *release.Release, opts Options) (*Engine, error) {
	tcfg := r.Config.Thinker.Text
	switch {
	case r.Format == release.FormatGGUF && r.Companion == nil:
		return nil, fmt.Errorf("engine: %s has no companion %s (written by clef quantize next to it; it holds the joint head)", r.Path, release.CompanionPath(r.Path))
	case r.Config.Head == nil:
		return nil, fmt.Errorf("engine: %s has no joint head configuration (%s)", r.Path, release.HeadConfigFile)
	}
	hcfg := *r.Config.Head
	if hcfg.HiddenSize != tcfg.Hidden {
		return nil, fmt.Errorf("engine: the joint head's hidden_size %d does not match the decoder's hidden size %d", hcfg.HiddenSize, tcfg.Hidden)
	}
	tok, err := r.Tokenizer()
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	lm, _, err := release.Lookup(r.Weights, lmHead(tcfg))
	if err != nil {
		return nil, fmt.Errorf("engine: the lexical prior needs %s: %w", release.LMHead, err)
	}
	if tok.VocabSize() > lm.Shape[0] {
		return nil, fmt.Errorf("engine: the tokenizer has %d tokens but the model's embedding has %d rows: wrong tokenizer for this model", tok.VocabSize(), lm.Shape[0])
	}
	head, err := schemahead.Load(r.Weights, hcfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	b, err := openBackend(opts)
	if err != nil {
		return nil, err
	}
	decoder, err := qwen3moe.Load(r.Weights, tcfg, b)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	// The joint head and the towers run on the same backend.
	if err := head.Bind(b); err != nil {
		b.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	tw, err := loadTowers(r, b, opts)
	if err != nil {
		b.Close()
		return nil, err
	}
	return &Engine{opts: opts, backend: b, weights: r.Weights, tok: tok, decoder: decoder, towers: tw, tokens: r.Config.Thinker.Tokens,
		head: head, lex: schemahead.TensorLexicon(lm), ffmpeg: ffmpegTools{path: opts.FFmpeg}}, nil
}

// lmHead is the decoder table's row of the output embedding.
func lmHead(c release.Text) release.Tensor {
	ts := release.DecoderTensors(c)
	return ts[len(ts)-1]
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

// Tokenizer returns the model's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// HeadConfig returns the joint head's configuration.
func (e *Engine) HeadConfig() release.Head { return e.head.Config() }

// DecoderConfig returns the text decoder's configuration.
func (e *Engine) DecoderConfig() release.Text { return e.decoder.Config }

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
// anything else is a failure of the runtime. ctx reaches every long loop:
// between decoder layers and row chunks, between the head's ops, and
// inside the backend's ops when it is a backend.Interruptible; a decision
// whose ctx is done stops and returns an error wrapping ctx.Err().
func (e *Engine) Decide(ctx context.Context, req *api.Request) (*api.Response, *Stats, error) {
	d, err := e.decide(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return d.resp, d.stats, nil
}

// Prepared is a request checked and encoded ahead of its decision
// (Prepare): the host's part of Decide, which a server runs on the
// request's own goroutine so that the goroutine running decisions never
// spends time on it (tokenizing a state of tens of megabytes takes
// seconds, and cannot be interrupted).
type Prepared struct {
	e      *Engine
	req    *api.Request
	enc    *api.Encoded
	encode time.Duration
	// prefix is the length of the record's cacheable prefix (everything
	// before the schema) and key its content hash; prefix is 0 when the
	// record cannot use the prefix cache.
	prefix int
	key    [32]byte
	// media are the record's decoded and processed media (nil for a text
	// record) and positions its 3-D positions (nil: plain text).
	media     *mediaInput
	positions [][3]int
}

// Tokens is the record's length (usage.input_tokens).
func (p *Prepared) Tokens() int { return len(p.enc.InputIDs) }

// Request is the request p was prepared from.
func (p *Prepared) Request() *api.Request { return p.req }

// Prepare is PrepareContext without a deadline.
func (e *Engine) Prepare(req *api.Request) (*Prepared, error) {
	return e.PrepareContext(context.Background(), req)
}

// PrepareContext validates req as Decide does, decodes its media (ctx
// bounds the video decoders: a request that ends stops them) and encodes
// its record. It may be called from any goroutine, while decisions run.
func (e *Engine) PrepareContext(ctx context.Context, req *api.Request) (*Prepared, error) {
	start := time.Now()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if e.opts.Strict {
		if err := req.ValidateHosted(); err != nil {
			return nil, err
		}
	}
	md, err := e.readMedia(ctx, req)
	if err != nil {
		return nil, err
	}
	p := &Prepared{e: e, req: req, media: md}
	stateAt := e.prefixLen // where the state starts: after the record prefix and the media
	if md == nil {
		if p.enc, err = record.Encode(e.tok, req, e.opts.MaxLength); err != nil {
			return nil, err
		}
	} else {
		enc, pl, err := record.EncodeMedia(e.tok, req, e.opts.MaxLength, md.counts(e.towers.merge))
		if err != nil {
			return nil, err
		}
		if p.positions, err = omni.Positions(enc.InputIDs, e.tokens, md.layout(), e.towers.merge, e.towers.perSecond); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		p.enc, stateAt = enc, pl.End
	}
	enc := p.enc
	if store := e.opts.PrefixCache; store != nil && store.Enabled() && e.decoder.CanResume() {
		// The schema starts after the record prefix, the media and the
		// state; it is never empty, so P < len(InputIDs).
		if P := stateAt + enc.StateTokens; P > 0 && P < len(enc.InputIDs) && e.decoder.PrefixBytes(P) <= store.MaxBytes() {
			p.prefix, p.key = P, e.prefixKey(enc.InputIDs[:P], md)
		}
	}
	p.encode = time.Since(start)
	if md != nil {
		p.encode -= md.decode + md.process
	}
	return p, nil
}

// DecidePrepared is Decide for a request Prepare checked and encoded (on
// this engine).
func (e *Engine) DecidePrepared(ctx context.Context, p *Prepared) (*api.Response, *Stats, error) {
	if p == nil || p.e != e {
		return nil, nil, errors.New("engine: the request was prepared by another engine")
	}
	d, err := e.run(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	return d.resp, d.stats, nil
}

// Estimate bounds from below the compute time (thinker and head) of p's
// decision from this engine's own measurements (see speed: the time
// recent decisions of comparable length took, or ran before they were
// cancelled), with the measurement it rests on in words. ok is false when
// no recent measurement bounds it, and when p's prefix is cached (then
// only its schema is computed). A server refuses a record whose estimate
// is past its deadline, instead of running it into the deadline.
func (e *Engine) Estimate(p *Prepared) (d time.Duration, basis string, ok bool) {
	if p == nil || p.e != e || (p.prefix > 0 && e.opts.PrefixCache.Contains(p.key)) {
		return 0, "", false
	}
	return e.speed.estimate(len(p.enc.InputIDs), time.Now())
}

// decision is everything one decide call produced (tests read all of it).
type decision struct {
	enc   *api.Encoded
	probs [][]float32 // per question, encoded option order
	resp  *api.Response
	stats *Stats
}

func (e *Engine) decide(ctx context.Context, req *api.Request) (*decision, error) {
	p, err := e.PrepareContext(ctx, req)
	if err != nil {
		return nil, err
	}
	return e.run(ctx, p)
}

// run computes a prepared record: the thinker, the head, the answers. The
// backend's interrupt is ctx while it runs, and the compute time is
// measured for Estimate (also when ctx cancels it midway).
func (e *Engine) run(ctx context.Context, p *Prepared) (*decision, error) {
	req, enc := p.req, p.enc
	st := &Stats{Encode: p.encode}
	if p.media != nil {
		st.Decode, st.Processor = p.media.decode, p.media.process
	}
	st.InputTokens, st.StateTokens, st.StateTruncated = len(enc.InputIDs), enc.StateTokens, enc.StateTruncated

	e.mu.Lock()
	defer e.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ib, ok := e.backend.(backend.Interruptible); ok {
		defer ib.Interrupt(ctx)()
	}
	start := time.Now()
	var done float64 // share of the thinker's row chunks done
	hidden, err := e.thinker(ctx, p, st, func(n, total int) { done = float64(n) / float64(total) })
	if err != nil {
		e.stopped(ctx, st, start, done)
		return nil, fmt.Errorf("engine: thinker: %w", err)
	}
	st.Thinker = time.Since(start)

	t := time.Now()
	qs := make([]schemahead.Question, len(enc.Questions))
	for i, q := range enc.Questions {
		qs[i] = schemahead.Question{Type: q.Type, Span: q.Span, OptionSpans: q.OptionSpans}
	}
	logits, err := e.head.LogitsContext(ctx, hidden, enc.InputIDs, qs, e.lex)
	if err != nil {
		e.stopped(ctx, st, start, 1)
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
	st.Total = st.Encode + st.Decode + st.Processor + time.Since(start)
	if !st.PrefixHit {
		e.speed.observe(st.InputTokens, st.Thinker+st.Head, 1, time.Now())
	}
	return &decision{enc: enc, probs: probs, resp: resp, stats: st}, nil
}

// stopped records, for a decision that ctx stopped midway with the share
// done of the thinker's row chunks done, how long it ran: speed turns it
// into a lower bound of what the record would have taken.
func (e *Engine) stopped(ctx context.Context, st *Stats, start time.Time, done float64) {
	if ctx.Err() == nil || st.PrefixHit {
		return
	}
	e.speed.observe(st.InputTokens, time.Since(start), min(done, 0.999), time.Now())
}

// thinker runs the thinker on the record and returns the hidden state of
// every position. With a prefix cache, the prefix (everything before the
// schema, p.prefix tokens) is looked up by content: on a hit only the rest
// runs, after the stored keys and values; on a miss the whole record runs
// and the prefix is stored.
func (e *Engine) thinker(ctx context.Context, p *Prepared, st *Stats, progress func(done, total int)) ([]float32, error) {
	ids, P := p.enc.InputIDs, p.prefix
	// input is the whole record's decoder input: with media, the towers
	// run and their rows replace the placeholders'.
	input := func() (qwen3moe.Input, error) {
		if p.media == nil {
			return qwen3moe.Input{IDs: ids, Progress: progress}, nil
		}
		in, err := e.towerInput(ctx, p, st)
		in.Progress = progress
		return in, err
	}
	if P == 0 {
		in, err := input()
		if err != nil {
			return nil, err
		}
		h, _, err := e.decoder.HiddenPrefix(ctx, in, 0)
		return h, err
	}
	store := e.opts.PrefixCache
	if pre, ok := store.Get(p.key); ok && pre != nil && pre.Acquire() {
		defer pre.Release()
		if pre.Len == P {
			st.PrefixHit, st.CachedTokens = true, P
			var pos [][3]int // nil: plain text positions after the prefix
			if p.positions != nil {
				pos = p.positions[P:]
			}
			rest, _, err := e.decoder.HiddenPrefix(ctx, qwen3moe.Input{IDs: ids[P:], Positions: pos, Past: pre, Progress: progress}, 0)
			if err != nil {
				return nil, err
			}
			hidden := make([]float32, 0, len(pre.Hidden)+len(rest))
			return append(append(hidden, pre.Hidden...), rest...), nil
		}
	}
	in, err := input()
	if err != nil {
		return nil, err
	}
	hidden, pre, err := e.decoder.HiddenPrefix(ctx, in, P)
	if err != nil {
		return nil, err
	}
	store.Put(p.key, pre, pre.Bytes())
	return hidden, nil
}

// prefixKey is the SHA-256 of the model's identity, the prefix's ids and,
// for a record with media, the media's bytes (placeholder ids do not tell
// two pictures of one size apart).
func (e *Engine) prefixKey(ids []int, md *mediaInput) [32]byte {
	h := sha256.New()
	h.Write([]byte(e.ident))
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(len(ids)))
	h.Write(buf[:])
	for _, id := range ids {
		binary.LittleEndian.PutUint32(buf[:4], uint32(id))
		h.Write(buf[:4])
	}
	if md != nil {
		h.Write([]byte("media\x00"))
		d := md.digest()
		h.Write(d[:])
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// IsRequestError reports whether err is a refusal of the request (an
// *api.Error) rather than a failure of the runtime.
func IsRequestError(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae)
}
