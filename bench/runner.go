package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/record"
)

// Stages are the time of one decision per stage. Tokenize is the record
// encoder run alone on the request (tokenizing every piece of the record);
// Encode is the engine's own validation, tokenization and encoding;
// Decode and Processor the media decoders and processors (images, audio);
// Thinker the thinker forward, of which Towers the vision and audio towers;
// Head the joint schema head and softmax. Over HTTP only the total is known.
type Stages struct {
	Tokenize, Encode, Decode, Processor, Thinker, Towers, Head time.Duration
}

// Result is one decision as a runner saw it.
type Result struct {
	Latency     time.Duration // the whole call (in process: Decide; HTTP: request to last byte)
	Stages      Stages
	InputTokens int
	// Probs are per question in request order; per option in the
	// response's order (noul: true, false; choice: criteria order; score:
	// levels). Values carry the response's 4 decimals.
	Probs [][]float64
}

// Runner answers records: in process on a loaded engine, or over HTTP.
type Runner interface {
	Decide(ctx context.Context, r *Record) (*Result, error)
	Close() error
}

// InProcess runs records on an engine in this process.
type InProcess struct {
	E *engine.Engine
	// MaxLength is the token budget the engine was opened with.
	MaxLength int
}

// Decide answers r and reports its stages.
func (p *InProcess) Decide(ctx context.Context, r *Record) (*Result, error) {
	t := time.Now()
	if r.Media != nil {
		if _, _, err := record.EncodeMedia(p.E.Tokenizer(), r.Req, p.MaxLength, *r.Media); err != nil {
			return nil, err
		}
	} else if _, err := record.Encode(p.E.Tokenizer(), r.Req, p.MaxLength); err != nil {
		return nil, err
	}
	tokenize := time.Since(t)
	start := time.Now()
	resp, st, err := p.E.Decide(ctx, r.Req)
	if err != nil {
		return nil, err
	}
	res := &Result{Latency: time.Since(start), InputTokens: st.InputTokens,
		Stages: Stages{Tokenize: tokenize, Encode: st.Encode, Decode: st.Decode, Processor: st.Processor, Thinker: st.Thinker, Towers: st.Towers, Head: st.Head}}
	res.Probs = ResponseProbs(resp)
	return res, nil
}

// Close closes the engine.
func (p *InProcess) Close() error { return p.E.Close() }

// ResponseProbs lists a response's probabilities per question, in answer
// order: a noul gives [p(true), 1-p(true)].
func ResponseProbs(resp *api.Response) [][]float64 {
	out := make([][]float64, len(resp.Answers))
	for i, a := range resp.Answers {
		if a.Type == api.Noul {
			out[i] = []float64{a.Noul, 1 - a.Noul}
			continue
		}
		ps := make([]float64, len(a.Probabilities))
		for k, p := range a.Probabilities {
			ps[k] = p.P
		}
		out[i] = ps
	}
	return out
}

// SystemOnePath is the daemon route the HTTP runner posts to.
const SystemOnePath = "/v1/systemone"

// maxResponseBytes bounds a daemon's answer.
const maxResponseBytes = 64 << 20

// HTTP posts records to a clef daemon (or any SystemOne server).
type HTTP struct {
	URL    string // base URL, e.g. http://127.0.0.1:8089
	Token  string // bearer token, if the daemon wants one
	Client *http.Client
}

// NewHTTP checks base and returns a runner for it.
func NewHTTP(base, token string) (*HTTP, error) {
	base = strings.TrimRight(base, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("bench: --url %q: want http://host:port", base)
	}
	return &HTTP{URL: base, Token: token, Client: &http.Client{Timeout: 30 * time.Minute}}, nil
}

// wireResponse is the SystemOne response as JSON.
type wireResponse struct {
	Answers map[string]struct {
		Type          string          `json:"type"`
		Noul          *float64        `json:"noul"`
		Probabilities json.RawMessage `json:"probabilities"`
	} `json:"answers"`
	Usage struct {
		InputTokens int `json:"input_tokens"`
	} `json:"usage"`
}

// Decide posts r and reads the answer.
func (h *HTTP) Decide(ctx context.Context, r *Record) (*Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+SystemOnePath, bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	start := time.Now()
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	lat := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("bench: reading the daemon's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: %s answered %s: %s", h.URL+SystemOnePath, resp.Status, clip(string(body), 300))
	}
	probs, tokens, err := parseWire(body, r.Req)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", h.URL+SystemOnePath, err)
	}
	return &Result{Latency: lat, InputTokens: tokens, Probs: probs}, nil
}

// parseWire reads the probabilities of a SystemOne response body in the
// request's question order, options in the response's order.
func parseWire(body []byte, req *api.Request) ([][]float64, int, error) {
	var w wireResponse
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, 0, fmt.Errorf("the answer is not a SystemOne response: %v", err)
	}
	out := make([][]float64, len(req.Questions))
	for i, q := range req.Questions {
		a, ok := w.Answers[q.ID]
		if !ok {
			return nil, 0, fmt.Errorf("the answer has no question %q", q.ID)
		}
		if a.Type == "noul" {
			if a.Noul == nil {
				return nil, 0, fmt.Errorf("question %q: noul answer without \"noul\"", q.ID)
			}
			out[i] = []float64{*a.Noul, 1 - *a.Noul}
			continue
		}
		ps, err := orderedFloats(a.Probabilities)
		if err != nil {
			return nil, 0, fmt.Errorf("question %q: probabilities: %v", q.ID, err)
		}
		out[i] = ps
	}
	return out, w.Usage.InputTokens, nil
}

// orderedFloats reads a JSON object of numbers keeping its key order.
func orderedFloats(raw json.RawMessage) ([]float64, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("want an object")
	}
	var out []float64
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		var v float64
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Close does nothing for HTTP.
func (h *HTTP) Close() error { return nil }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
