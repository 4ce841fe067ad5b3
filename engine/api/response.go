package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/clefrt/clef/engine/pyjson"
)

// Response is the SystemOne response: the request's model, one answer per
// question in request order, and the token usage.
type Response struct {
	Model   string
	Answers []Decision
	Usage   Usage
}

// Usage counts tokens: input ids fed to the model; nothing is generated.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Decision is the answer to one question (spec §1.4). Every number is already
// rounded as Python's round(x, 4).
type Decision struct {
	ID   string
	Type QuestionType
	// Noul is p(true) for a noul question (which has no confidence).
	Noul float64
	// Choice is the most probable option of a choice question, the first
	// one in the request's criteria order on a tie.
	Choice string
	// Score is sum(i * p_i) for a score question.
	Score float64
	// Confidence is the largest probability (choice and score).
	Confidence float64
	// Legend maps "0".."n-1" to the score levels' descriptions as sent.
	Legend []LegendEntry
	// Probabilities are per option in the request's criteria order (choice)
	// or per level "0".."n-1" (score).
	Probabilities []Prob
}

// Prob is one option's probability.
type Prob struct {
	Key string
	P   float64
}

// LegendEntry is one score level: its index as a string and its description.
type LegendEntry struct {
	Key   string
	Value *pyjson.Value
}

// CheckProbs reports whether probs fits enc: one row per encoded question,
// one probability per encoded option.
func CheckProbs(enc *Encoded, probs [][]float32) error {
	if len(probs) != len(enc.Questions) {
		return fmt.Errorf("api: %d probability rows for %d questions", len(probs), len(enc.Questions))
	}
	for i, q := range enc.Questions {
		if len(probs[i]) != len(q.OptionIDs) {
			return fmt.Errorf("api: question %q: %d probabilities for %d options", q.ID, len(probs[i]), len(q.OptionIDs))
		}
	}
	return nil
}

// Answer maps the model's probabilities to the SystemOne response as the
// reference's systemone_answer does. probs holds, per encoded question, the
// probabilities in encoded option order (noul true,false; choice sorted by
// id; score by level). enc must come from encoding req, and probs must pass
// CheckProbs; a missing probability is taken as 0.
func Answer(req *Request, enc *Encoded, probs [][]float32) *Response {
	resp := &Response{Model: req.Model, Usage: Usage{InputTokens: len(enc.InputIDs)}}
	byID := make(map[string]*Question, len(req.Questions))
	for i := range req.Questions {
		byID[req.Questions[i].ID] = &req.Questions[i]
	}
	for qi, eq := range enc.Questions {
		var row []float32
		if qi < len(probs) {
			row = probs[qi]
		}
		p := func(k int) float64 {
			if k < 0 || k >= len(row) {
				return 0
			}
			return float64(row[k])
		}
		a := Decision{ID: eq.ID, Type: QuestionType(eq.Type)}
		switch QuestionType(eq.Type) {
		case Noul:
			a.Noul = pyjson.Round(p(0), 4)
		case Choice:
			// The request's criteria order, not the encoded (sorted) one.
			order := eq.OptionIDs
			if q := byID[eq.ID]; q != nil && q.Criteria != nil && q.Criteria.Kind == pyjson.Object {
				order = q.Criteria.Keys
			}
			at := make(map[string]int, len(eq.OptionIDs))
			for k, id := range eq.OptionIDs {
				at[id] = k
			}
			best, first := 0.0, true
			for _, id := range order {
				k, ok := at[id]
				if !ok {
					k = -1
				}
				v := p(k)
				if first || v > best {
					best, a.Choice, first = v, id, false
				}
				a.Probabilities = append(a.Probabilities, Prob{id, pyjson.Round(v, 4)})
			}
			a.Confidence = pyjson.Round(best, 4)
		case Score:
			var crit *pyjson.Value
			if q := byID[eq.ID]; q != nil {
				crit = q.Criteria
			}
			sum, best := 0.0, 0.0
			for k := range eq.OptionIDs {
				v := p(k)
				sum += float64(k) * v
				if k == 0 || v > best {
					best = v
				}
				key := strconv.Itoa(k)
				var desc *pyjson.Value
				if crit != nil && crit.Kind == pyjson.Array && k < len(crit.Items) {
					desc = crit.Items[k]
				}
				a.Legend = append(a.Legend, LegendEntry{key, desc})
				a.Probabilities = append(a.Probabilities, Prob{key, pyjson.Round(v, 4)})
			}
			a.Score = pyjson.Round(sum, 4)
			a.Confidence = pyjson.Round(best, 4)
		}
		resp.Answers = append(resp.Answers, a)
	}
	return resp
}

// AppendJSON appends the response as json.dumps writes the reference's dict
// under o: {"model", "answers": {id: {"type", ...}}, "usage"}.
func (r *Response) AppendJSON(dst []byte, o pyjson.Options) []byte {
	key := func(dst []byte, first bool, k string) []byte {
		if !first {
			dst = append(dst, o.ItemSep...)
		}
		dst = pyjson.AppendString(dst, k, o.EnsureASCII)
		return append(dst, o.KeySep...)
	}
	dst = append(dst, '{')
	dst = key(dst, true, "model")
	dst = pyjson.AppendString(dst, r.Model, o.EnsureASCII)
	dst = key(dst, false, "answers")
	dst = append(dst, '{')
	for i, a := range r.Answers {
		dst = key(dst, i == 0, a.ID)
		dst = a.appendJSON(dst, o, key)
	}
	dst = append(dst, '}')
	dst = key(dst, false, "usage")
	dst = append(dst, '{')
	dst = key(dst, true, "input_tokens")
	dst = strconv.AppendInt(dst, int64(r.Usage.InputTokens), 10)
	dst = key(dst, false, "output_tokens")
	dst = strconv.AppendInt(dst, int64(r.Usage.OutputTokens), 10)
	return append(dst, '}', '}')
}

func (a *Decision) appendJSON(dst []byte, o pyjson.Options, key func([]byte, bool, string) []byte) []byte {
	probs := func(dst []byte) []byte {
		dst = key(dst, false, "probabilities")
		dst = append(dst, '{')
		for i, p := range a.Probabilities {
			dst = key(dst, i == 0, p.Key)
			dst = pyjson.AppendFloat(dst, p.P)
		}
		return append(dst, '}')
	}
	dst = append(dst, '{')
	dst = key(dst, true, "type")
	dst = pyjson.AppendString(dst, a.Type.String(), o.EnsureASCII)
	switch a.Type {
	case Noul:
		dst = key(dst, false, "noul")
		dst = pyjson.AppendFloat(dst, a.Noul)
	case Choice:
		dst = key(dst, false, "choice")
		dst = pyjson.AppendString(dst, a.Choice, o.EnsureASCII)
		dst = key(dst, false, "confidence")
		dst = pyjson.AppendFloat(dst, a.Confidence)
		dst = probs(dst)
	case Score:
		dst = key(dst, false, "score")
		dst = pyjson.AppendFloat(dst, a.Score)
		dst = key(dst, false, "confidence")
		dst = pyjson.AppendFloat(dst, a.Confidence)
		dst = key(dst, false, "legend")
		dst = append(dst, '{')
		for i, l := range a.Legend {
			dst = key(dst, i == 0, l.Key)
			dst = pyjson.Append(dst, l.Value, o)
		}
		dst = append(dst, '}')
		dst = probs(dst)
	}
	return append(dst, '}')
}

// MarshalJSON writes the response as Python's json.dumps(response) does by
// default (", " and ": " separators, ASCII only), which is how the reference
// goldens are written.
func (r *Response) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil, pyjson.Default), nil }

// Envelope is the Workers AI REST wrapper:
// {"result": ..., "success": ..., "errors": [{"code", "message"}], "messages": []}.
type Envelope struct {
	Result   *Response
	Success  bool
	Errors   []EnvelopeError
	Messages []string
}

// EnvelopeError is one entry of Envelope.Errors.
type EnvelopeError struct {
	Code    int
	Message string
}

// Wrap returns the success envelope around r.
func Wrap(r *Response) *Envelope { return &Envelope{Result: r, Success: true} }

// Fail returns the failure envelope for err and the HTTP status to send:
// an *Error keeps its status and code, anything else is a 500 with code 5012.
func Fail(err error) (*Envelope, int) {
	var e *Error
	if errors.As(err, &e) {
		return &Envelope{Errors: []EnvelopeError{{e.Code, e.Message}}}, e.Status
	}
	return &Envelope{Errors: []EnvelopeError{{CodeInternal, err.Error()}}}, http.StatusInternalServerError
}

// AppendJSON appends the envelope under o; a nil Result is written as null.
func (e *Envelope) AppendJSON(dst []byte, o pyjson.Options) []byte {
	sep := func(dst []byte, k string) []byte {
		dst = pyjson.AppendString(dst, k, o.EnsureASCII)
		return append(dst, o.KeySep...)
	}
	dst = append(dst, '{')
	dst = sep(dst, "result")
	if e.Result != nil {
		dst = e.Result.AppendJSON(dst, o)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, o.ItemSep...)
	dst = sep(dst, "success")
	dst = strconv.AppendBool(dst, e.Success)
	dst = append(dst, o.ItemSep...)
	dst = sep(dst, "errors")
	dst = append(dst, '[')
	for i, er := range e.Errors {
		if i > 0 {
			dst = append(dst, o.ItemSep...)
		}
		dst = append(dst, '{')
		dst = sep(dst, "code")
		dst = strconv.AppendInt(dst, int64(er.Code), 10)
		dst = append(dst, o.ItemSep...)
		dst = sep(dst, "message")
		dst = pyjson.AppendString(dst, er.Message, o.EnsureASCII)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	dst = append(dst, o.ItemSep...)
	dst = sep(dst, "messages")
	dst = append(dst, '[')
	for i, m := range e.Messages {
		if i > 0 {
			dst = append(dst, o.ItemSep...)
		}
		dst = pyjson.AppendString(dst, m, o.EnsureASCII)
	}
	return append(dst, ']', '}')
}

// MarshalJSON writes the envelope compactly, as the Workers AI API does.
func (e *Envelope) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(nil, pyjson.Options{ItemSep: ",", KeySep: ":"}), nil
}
