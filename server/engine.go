package server

import (
	"context"
	"fmt"
	"time"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
)

// EngineLoader returns a Loader that opens the model at path with opts; the
// engine keeps record prefixes in the server's cache (see PrefixCache).
func EngineLoader(path string, opts engine.Options) Loader {
	return func(ctx context.Context, cache *Prefixes) (Model, error) {
		opts := opts
		opts.PrefixCache = cache
		e, err := engine.Open(path, opts)
		if err != nil {
			return nil, err
		}
		return &engineModel{e: e}, nil
	}
}

// engineModel is an *engine.Engine as the server uses it: a Preparer, so
// requests are validated and tokenized on their own goroutines and refused
// early when the engine's measured speed says they cannot finish in time.
type engineModel struct{ e *engine.Engine }

var _ Preparer = (*engineModel)(nil)

func (m *engineModel) Decide(ctx context.Context, req *api.Request) (*Decision, error) {
	resp, st, err := m.e.Decide(ctx, req)
	return decision(resp, st, err)
}

// enginePrepared is a request the engine prepared.
type enginePrepared struct {
	e *engine.Engine
	p *engine.Prepared
}

func (p *enginePrepared) Tokens() int { return p.p.Tokens() }

func (p *enginePrepared) Estimate() (time.Duration, string, bool) { return p.e.Estimate(p.p) }

func (m *engineModel) Prepare(ctx context.Context, req *api.Request) (Prepared, error) {
	p, err := m.e.PrepareContext(ctx, req)
	if err != nil {
		return nil, err
	}
	return &enginePrepared{e: m.e, p: p}, nil
}

func (m *engineModel) DecidePrepared(ctx context.Context, p Prepared) (*Decision, error) {
	ep, ok := p.(*enginePrepared)
	if !ok {
		return nil, fmt.Errorf("server: %T is not a request the engine prepared", p)
	}
	if ep.e != m.e { // prepared before the model was reloaded
		return m.Decide(ctx, ep.p.Request())
	}
	resp, st, err := m.e.DecidePrepared(ctx, ep.p)
	return decision(resp, st, err)
}

// decision renders the engine's answer for the server.
func decision(resp *api.Response, st *engine.Stats, err error) (*Decision, error) {
	if err != nil {
		return nil, err
	}
	body, err := resp.MarshalJSON()
	if err != nil {
		return nil, err
	}
	d := &Decision{Body: body, InputTokens: resp.Usage.InputTokens}
	if st != nil {
		d.InputTokens = st.InputTokens
		d.Stages = []Stage{{"encode", st.Encode}, {"thinker", st.Thinker}, {"head", st.Head}}
		if st.Decode+st.Processor > 0 { // a record with media: its decoders (videos: ffmpeg), processors and towers
			d.Stages = append(d.Stages, Stage{"media_decode", st.Decode}, Stage{"processor", st.Processor}, Stage{"towers", st.Towers})
		}
		if st.PrefixHit {
			d.CachedTokens = st.CachedTokens
		}
	}
	return d, nil
}

func (m *engineModel) Close() error { return m.e.Close() }

// Backend names the compute backend the model runs on.
func (m *engineModel) Backend() string { return m.e.Backend() }
