package server

import (
	"context"

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

// engineModel is an *engine.Engine as the server uses it.
type engineModel struct{ e *engine.Engine }

func (m *engineModel) Decide(ctx context.Context, req *api.Request) (*Decision, error) {
	resp, st, err := m.e.Decide(ctx, req)
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
		if st.PrefixHit {
			d.CachedTokens = st.CachedTokens
		}
	}
	return d, nil
}

func (m *engineModel) Close() error { return m.e.Close() }

// Backend names the compute backend the model runs on.
func (m *engineModel) Backend() string { return m.e.Backend() }
