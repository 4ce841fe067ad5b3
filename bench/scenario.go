// Package bench measures Clef decisions: per-schema latency (p50/p95/p99,
// prefill tokens/s, time per stage, load time, peak RSS) of one or several
// model files on the same deterministic records, their agreement with the
// highest-precision one, and the CPU (or Metal) kernels against the machine's
// roofline. It writes report.json (field names documented in README.md and
// kept stable), report.md, SVG plots and Go benchmark lines for benchstat.
//
// The order of this package follows a run: scenarios (this file), runners
// (runner.go), the run itself (run.go), agreement metrics (agreement.go),
// reports (report.go, markdown.go, svg.go), kernels (kernels.go) and the
// synthetic real-shape model (synth.go).
package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
	"github.com/clefrt/clef/engine/record"
)

// FillBudget is the state size that fills the record's token budget: the
// state gets maxLength minus the record's fixed part ("64k" is this size
// at the reference's max_length of 64000).
const FillBudget = -1

// StateSize is one state length of the grid: its label and target token
// count (FillBudget for "64k").
type StateSize struct {
	Label  string
	Tokens int
}

// ParseStates parses a list such as "256,1k,4k,16k,64k". "1k" is 1024
// tokens, "4k" 4096, "16k" 16384; "64k" fills the whole token budget (the
// reference's 64000 less the schema); plain numbers are token counts.
func ParseStates(list string) ([]StateSize, error) {
	var out []StateSize
	for _, f := range splitList(list) {
		l := strings.ToLower(f)
		if l == "64k" || l == "max" {
			out = append(out, StateSize{Label: "64k", Tokens: FillBudget})
			continue
		}
		mult := 1
		if s, ok := strings.CutSuffix(l, "k"); ok {
			l, mult = s, 1024
		}
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 || n > 1<<20 {
			return nil, fmt.Errorf("bench: state size %q: want a token count such as 256, 1k, 4k, 16k or 64k", f)
		}
		out = append(out, StateSize{Label: f, Tokens: n * mult})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no state sizes given")
	}
	return out, nil
}

// ParseInts parses a comma-separated list of integers in [lo, hi].
func ParseInts(what, list string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range splitList(list) {
		n, err := strconv.Atoi(f)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("bench: %s %q: want an integer from %d to %d", what, f, lo, hi)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no %s given", what)
	}
	return out, nil
}

func splitList(list string) []string {
	var out []string
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Grid selects the synthetic scenarios: every combination of state size,
// question count and option count, with Records different records each.
type Grid struct {
	States    []StateSize
	Questions []int // 1..64 (the hosted limit)
	Options   []int // 2..255: choices get this many options, scores min(it, 10) levels, nouls 2
	Records   int   // records per scenario (different state text), default 1
	Seed      uint64
}

// Limits of a synthetic schema: the hosted Workers AI limits, so that the
// same records can be sent to any daemon.
const (
	MaxQuestions = api.MaxQuestions
	MaxOptions   = api.MaxChoiceOptions
	MinOptions   = 2
	maxLevels    = api.MaxScoreLevels
)

// Scenario is a group of records sharing one schema shape. Its token counts
// are known before anything runs.
type Scenario struct {
	Name       string // "s256-q8-o4" (synthetic) or "jsonl-<n>" / the first record's id
	Source     string // "synthetic" or "jsonl"
	StateLabel string // "256", "1k", ... ("" for JSONL)
	Questions  int
	Options    int // the option count asked for (synthetic), the largest one (JSONL)
	// Types counts questions per type name (noul, choice, score).
	Types   map[string]int
	Records []*Record
}

// Record is one request of a scenario, encoded once with the model's
// tokenizer so that its length is known before running.
type Record struct {
	ID             string
	Body           []byte // the SystemOne request as sent
	Req            *api.Request
	InputTokens    int
	StateTokens    int
	StateTruncated bool
	// QuestionTypes are the questions' types in request order (0 noul, 1 choice, 2 score).
	QuestionTypes []int
	// Media are the placeholder counts of a record with media (nil for a
	// text record).
	Media *record.Media
}

// InputTokens returns the mean record length of the scenario.
func (s *Scenario) InputTokens() int {
	if len(s.Records) == 0 {
		return 0
	}
	n := 0
	for _, r := range s.Records {
		n += r.InputTokens
	}
	return n / len(s.Records)
}

// StateTokens returns the mean state length of the scenario.
func (s *Scenario) StateTokens() int {
	if len(s.Records) == 0 {
		return 0
	}
	n := 0
	for _, r := range s.Records {
		n += r.StateTokens
	}
	return n / len(s.Records)
}

// Skipped is a grid cell that cannot be built (its schema alone exceeds the
// token budget); Build reports them instead of failing.
type Skipped struct {
	Name   string
	Reason string
}

// Build makes the grid's scenarios with tok (the model's tokenizer) under
// the token budget maxLength. Each state is built to hit its target token
// count exactly; Build fails if it cannot.
func Build(tok record.Tokenizer, g Grid, maxLength int) ([]*Scenario, []Skipped, error) {
	if maxLength <= 0 {
		maxLength = record.DefaultMaxLength
	}
	if g.Records <= 0 {
		g.Records = 1
	}
	for _, q := range g.Questions {
		if q < 1 || q > MaxQuestions {
			return nil, nil, fmt.Errorf("bench: %d questions: want 1..%d", q, MaxQuestions)
		}
	}
	for _, o := range g.Options {
		if o < MinOptions || o > MaxOptions {
			return nil, nil, fmt.Errorf("bench: %d options: want %d..%d", o, MinOptions, MaxOptions)
		}
	}
	gen := newTextGen(tok)
	var out []*Scenario
	var skipped []Skipped
	for _, st := range g.States {
		for _, nq := range g.Questions {
			for _, no := range g.Options {
				name := fmt.Sprintf("s%s-q%d-o%d", st.Label, nq, no)
				sc := &Scenario{Name: name, Source: "synthetic", StateLabel: st.Label, Questions: nq, Options: no, Types: map[string]int{}}
				for r := 0; r < g.Records; r++ {
					seed := g.Seed ^ uint64(r+1)*0x9e3779b97f4a7c15 ^ uint64(nq)<<20 ^ uint64(no)<<32
					questions := synthQuestions(nq, no, seed)
					// The fixed part first (empty state), then the state sized to fit.
					fixed, err := encodeBody(tok, requestBody("", questions), maxLength)
					var ae *api.Error
					if errors.As(err, &ae) && ae.Status == http.StatusRequestEntityTooLarge {
						skipped = append(skipped, Skipped{name, ae.Message})
						sc = nil
						break
					}
					if err != nil {
						return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
					}
					target := st.Tokens
					if target == FillBudget {
						target = maxLength - fixed.FixedLength
					}
					if target <= 0 || fixed.FixedLength+target > maxLength {
						skipped = append(skipped, Skipped{name, fmt.Sprintf("the schema takes %d tokens: %d state tokens do not fit max length %d", fixed.FixedLength, st.Tokens, maxLength)})
						sc = nil
						break
					}
					text, err := gen.text(target, seed)
					if err != nil {
						return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
					}
					rec, err := newRecord(tok, fmt.Sprintf("%s-r%d", name, r), requestBody(text, questions), maxLength)
					if err != nil {
						return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
					}
					if rec.StateTokens != target || rec.StateTruncated {
						return nil, nil, fmt.Errorf("bench: %s: state built to %d tokens encodes to %d", name, target, rec.StateTokens)
					}
					sc.Records = append(sc.Records, rec)
				}
				if sc == nil {
					continue
				}
				for _, t := range sc.Records[0].QuestionTypes {
					sc.Types[api.QuestionType(t).String()]++
				}
				out = append(out, sc)
			}
		}
	}
	return out, skipped, nil
}

// synthQuestion is one generated question.
type synthQuestion struct {
	id, typ, instructions string
	criteria              string // JSON
}

// synthQuestions makes n questions cycling choice, noul, score (a single
// question is a choice, so that the option count matters): a choice has
// opts options, a score min(opts, 10) levels, a noul its two defaults.
func synthQuestions(n, opts int, seed uint64) []synthQuestion {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	qs := make([]synthQuestion, n)
	for i := range qs {
		q := &qs[i]
		q.id = fmt.Sprintf("q%02d", i+1)
		topic := words[rng.IntN(len(words))]
		switch i % 3 {
		case 1:
			q.typ = "noul"
			q.instructions = fmt.Sprintf("Does the state say anything about the %s?", topic)
		case 0:
			q.typ = "choice"
			q.instructions = fmt.Sprintf("Which option best describes how the state treats the %s?", topic)
			var b bytes.Buffer
			b.WriteByte('{')
			for k := 0; k < opts; k++ {
				if k > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%s: %s", jsonString(fmt.Sprintf("opt_%03d", k)),
					jsonString(fmt.Sprintf("The state is mostly about the %s.", words[rng.IntN(len(words))])))
			}
			b.WriteByte('}')
			q.criteria = b.String()
		default:
			q.typ = "score"
			q.instructions = fmt.Sprintf("How strongly does the state concern the %s?", topic)
			levels := min(opts, maxLevels)
			var b bytes.Buffer
			b.WriteByte('[')
			for k := 0; k < levels; k++ {
				if k > 0 {
					b.WriteString(", ")
				}
				b.WriteString(jsonString(fmt.Sprintf("Level %d of %d.", k, levels-1)))
			}
			b.WriteByte(']')
			q.criteria = b.String()
		}
	}
	return qs
}

// requestBody writes a SystemOne request with the questions in order.
func requestBody(state string, qs []synthQuestion) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model": "clef-omni", "state": %s, "questions": {`, jsonString(state))
	for i, q := range qs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `%s: {"type": %s, "instructions": %s`, jsonString(q.id), jsonString(q.typ), jsonString(q.instructions))
		if q.criteria != "" {
			fmt.Fprintf(&b, `, "criteria": %s`, q.criteria)
		}
		b.WriteByte('}')
	}
	b.WriteString("}}")
	return b.Bytes()
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// encodeBody parses and encodes a request body.
func encodeBody(tok record.Tokenizer, body []byte, maxLength int) (*record.Encoded, error) {
	req, err := api.ParseRequest(body)
	if err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return record.Encode(tok, req, maxLength)
}

// newRecord parses, validates and encodes one request.
func newRecord(tok record.Tokenizer, id string, body []byte, maxLength int) (*Record, error) {
	req, err := api.ParseRequest(body)
	if err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	enc, err := record.Encode(tok, req, maxLength)
	if err != nil {
		return nil, err
	}
	r := &Record{ID: id, Body: body, Req: req, InputTokens: len(enc.InputIDs), StateTokens: enc.StateTokens, StateTruncated: enc.StateTruncated}
	for _, q := range enc.Questions {
		r.QuestionTypes = append(r.QuestionTypes, q.Type)
	}
	return r, nil
}

// maxJSONLLine bounds one request line of a scenarios file.
const maxJSONLLine = 64 << 20

// LoadJSONL reads user requests, one JSON object per line (blank lines and
// lines starting with # are skipped), encodes each with tok, and groups them
// by schema (question ids, types and option counts): one scenario per
// schema, named after the first record's "id" field or jsonl-<n>.
func LoadJSONL(r io.Reader, tok record.Tokenizer, maxLength int) ([]*Scenario, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), maxJSONLLine)
	bySchema := map[string]*Scenario{}
	var out []*Scenario
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		body := append([]byte(nil), text...)
		rec, err := newRecord(tok, fmt.Sprintf("line%d", line), body, maxLength)
		if err != nil {
			return nil, fmt.Errorf("bench: scenarios line %d: %w", line, err)
		}
		if id := rec.Req.Doc.Get("id"); id != nil && id.Kind == pyjson.String && id.Str != "" {
			rec.ID = id.Str
		}
		key, nopts := schemaKey(rec)
		s := bySchema[key]
		if s == nil {
			s = &Scenario{Name: fmt.Sprintf("jsonl-%d", len(out)+1), Source: "jsonl", Questions: len(rec.QuestionTypes), Options: nopts, Types: map[string]int{}}
			if !strings.HasPrefix(rec.ID, "line") {
				s.Name = "jsonl-" + sanitize(rec.ID)
			}
			for _, t := range rec.QuestionTypes {
				s.Types[api.QuestionType(t).String()]++
			}
			bySchema[key] = s
			out = append(out, s)
		}
		s.Records = append(s.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: scenarios line %d: %w", line+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: the scenarios file holds no requests")
	}
	return out, nil
}

// schemaKey identifies a record's schema: question ids, types and option
// counts; it also returns the largest option count.
func schemaKey(r *Record) (string, int) {
	var b strings.Builder
	most := 0
	for i, q := range r.Req.Questions {
		n := 2
		if c := q.Criteria; c != nil {
			n = max(len(c.Keys), len(c.Items), 2)
		}
		most = max(most, n)
		fmt.Fprintf(&b, "%s/%d/%d;", q.ID, r.QuestionTypes[i], n)
	}
	return b.String(), most
}

// sanitize keeps a name usable in file names and benchmark lines.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 48 {
			break
		}
	}
	return b.String()
}

// SortScenarios orders scenarios by input length, then name.
func SortScenarios(s []*Scenario) {
	sort.SliceStable(s, func(i, j int) bool {
		if a, b := s[i].InputTokens(), s[j].InputTokens(); a != b {
			return a < b
		}
		return s[i].Name < s[j].Name
	})
}
