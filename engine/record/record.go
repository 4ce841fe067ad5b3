// Package record turns a SystemOne request into the Clef model's input, as
// the reference's encode_record does: the chat prefix, the media
// placeholders (media.go), the state (cut from its end to fit), the schema
// block with one field per question and one option line per allowed option,
// and the suffix. Every piece is tokenized on its own, and the instruction
// and option spans are recorded as token ranges; the joint schema head pools
// the hidden states over them.
package record

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
)

// Tokenizer is what the encoder needs from a tokenizer: text to ids with no
// special tokens added, added tokens matched in the text.
type Tokenizer interface {
	Encode(text string) []int
}

// Encoded is an encoded request (defined in api so that api.Answer can take
// it).
type Encoded = api.Encoded

// Question is one encoded question: its type, instruction span and option
// spans and ids.
type Question = api.EncodedQuestion

// DefaultMaxLength is clef-omni's DEFAULT_MAX_LENGTH (clef-flash's is 16384).
const DefaultMaxLength = 64000

// The fixed text of a Clef record, identical in clef-flash and clef-omni.
const (
	SystemPrompt = "Read the complete state and schema. Decide every field jointly. " +
		"Each answer must be exactly one of that field's allowed options."
	Prefix       = "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nSTATE:\n"
	SchemaHeader = "\n\nSCHEMA FIELDS:\n"
	Suffix       = "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"

	// NoulTrue and NoulFalse are a noul question's option descriptions
	// unless its criteria replace them.
	NoulTrue  = "The proposition is true or the answer is yes."
	NoulFalse = "The proposition is false or the answer is no."
)

// Encode encodes a text-only request. maxLength <= 0 means DefaultMaxLength.
// It fails where encode_record fails, with its message (api.Error.Python):
// a record with images, audio or videos (they need their processors; see
// EncodeMedia), a missing state, questions or type, an unknown type, a
// choice without criteria, criteria of the wrong shape, no questions, and a
// fixed part longer than maxLength (413).
func Encode(tok Tokenizer, req *api.Request, maxLength int) (*Encoded, error) {
	for _, m := range []struct {
		field string
		v     *pyjson.Value
	}{{"images", req.Images}, {"videos", req.Videos}} {
		if m.v.Truthy() {
			return nil, refErr(http.StatusUnprocessableEntity, api.CodeValidation, m.field, "ValueError",
				"records with images or videos require a processor", "")
		}
	}
	if req.Audio.Truthy() {
		return nil, refErr(http.StatusUnprocessableEntity, api.CodeValidation, "audio", "ValueError",
			"records with audio require a processor", "")
	}
	if maxLength <= 0 {
		maxLength = DefaultMaxLength
	}
	enc, _, err := encode(tok, req, maxLength, nil)
	return enc, err
}

// encode encodes req with the media block media (placeholder ids, possibly
// none) right after the prefix, before the state; the media count in the
// fixed part, so they are never cut: only the state is. It also returns the
// prefix's length (where the media start).
func encode(tok Tokenizer, req *api.Request, maxLength int, media []int) (*Encoded, int, error) {
	if req.State == nil {
		return nil, 0, keyErr("state")
	}
	stateIDs := tok.Encode(pyjson.Render(req.State))

	qs := req.Doc.Get("questions")
	if qs == nil {
		return nil, 0, keyErr("questions")
	}
	if qs.Kind != pyjson.Object {
		return nil, 0, refErr(http.StatusUnprocessableEntity, api.CodeValidation, "questions", "AttributeError",
			fmt.Sprintf("questions must be an object of id to question, got %s", qs.Kind),
			fmt.Sprintf("'%s' object has no attribute 'items'", pyTypeName(qs)))
	}

	enc := &Encoded{RecordID: "unknown"}
	if id := req.Doc.Get("id"); id != nil {
		enc.RecordID = pyStr(id)
	}
	// The schema, with spans relative to its own start.
	var schema []int
	schema = append(schema, tok.Encode(SchemaHeader)...)
	for n, q := range req.Questions {
		eq, ids, err := encodeQuestion(tok, n+1, &q, len(schema))
		if err != nil {
			return nil, 0, err
		}
		schema = append(schema, ids...)
		enc.Questions = append(enc.Questions, eq)
	}
	prefix := tok.Encode(Prefix)
	suffix := tok.Encode(Suffix)
	if len(enc.Questions) == 0 {
		return nil, 0, refErr(http.StatusBadRequest, api.CodeBadRequest, "questions", "ValueError",
			"record produced no model input or questions", "")
	}
	head := len(prefix) + len(media)
	fixed := head + len(schema) + len(suffix)
	if fixed > maxLength {
		msg := fmt.Sprintf("schema requires %d tokens before state; maximum is %d", fixed, maxLength)
		if len(media) > 0 {
			msg = fmt.Sprintf("media need %d tokens and the prompt and schema %d more: %d tokens before state; maximum is %d",
				len(media), fixed-len(media), fixed, maxLength)
		}
		return nil, 0, refErr(http.StatusRequestEntityTooLarge, api.CodeTooLong, "", "ValueError", msg, "")
	}
	keep := min(len(stateIDs), maxLength-fixed)
	enc.StateTruncated = keep < len(stateIDs)
	enc.StateTokens = keep
	enc.FixedLength = fixed

	ids := make([]int, 0, fixed+keep)
	ids = append(ids, prefix...)
	ids = append(ids, media...)
	ids = append(ids, stateIDs[:keep]...)
	shift := len(ids)
	ids = append(ids, schema...)
	ids = append(ids, suffix...)
	enc.InputIDs = ids
	for i := range enc.Questions {
		q := &enc.Questions[i]
		q.Span[0] += shift
		q.Span[1] += shift
		for k := range q.OptionSpans {
			q.OptionSpans[k][0] += shift
			q.OptionSpans[k][1] += shift
		}
	}
	return enc, len(prefix), nil
}

// option is one allowed option: its id and description (nil: none, the
// option is rendered without a "description" key).
type option struct {
	id   string
	desc *pyjson.Value
}

// encodeQuestion tokenizes field n and returns it with spans relative to
// schema offset at.
func encodeQuestion(tok Tokenizer, n int, q *api.Question, at int) (Question, []int, error) {
	eq := Question{ID: q.ID}
	if q.Raw.Kind != pyjson.Object {
		return eq, nil, refErr(http.StatusUnprocessableEntity, api.CodeValidation, "questions."+q.ID, "TypeError",
			fmt.Sprintf("question %q must be an object, got %s", q.ID, q.Raw.Kind), "")
	}
	tv := q.Raw.Get("type")
	if tv == nil {
		return eq, nil, keyErr("type")
	}
	t, ok := api.ParseQuestionType(q.Type)
	if !ok {
		if tv.Kind == pyjson.Array || tv.Kind == pyjson.Object {
			return eq, nil, refErr(http.StatusBadRequest, api.CodeBadRequest, "questions."+q.ID+".type", "TypeError",
				fmt.Sprintf("question %q: type must be noul, choice, or score, got %s", q.ID, tv.Kind),
				fmt.Sprintf("unhashable type: '%s'", pyTypeName(tv)))
		}
		return eq, nil, refErr(http.StatusBadRequest, api.CodeBadRequest, "questions."+q.ID+".type", "KeyError",
			fmt.Sprintf("question %q: unknown type %s (must be noul, choice, or score)", q.ID, pyRepr(tv)), pyRepr(tv))
	}
	eq.Type = int(t)
	opts, err := options(q, t)
	if err != nil {
		return eq, nil, err
	}
	instr := q.Instructions
	text := q.ID
	if !(instr.IsNull() || instr.Kind == pyjson.String && instr.Str == "") {
		text = pyjson.Render(instr)
	}

	var ids []int
	ids = append(ids, tok.Encode("\nFIELD "+strconv.Itoa(n)+"\nID: "+q.ID+"\nTYPE: "+q.Type+"\nINSTRUCTION: ")...)
	eq.Span[0] = at + len(ids)
	ids = append(ids, tok.Encode(text)...)
	eq.Span[1] = at + len(ids)
	ids = append(ids, tok.Encode("\nALLOWED OPTIONS:\n")...)
	for k, o := range opts {
		ids = append(ids, tok.Encode("OPTION "+strconv.Itoa(k+1)+": ")...)
		obj := pyjson.NewObject()
		obj.Set("option_id", pyjson.NewString(o.id))
		if !o.desc.IsNull() {
			obj.Set("description", o.desc)
		}
		start := at + len(ids)
		ids = append(ids, tok.Encode(pyjson.Render(obj))...)
		eq.OptionSpans = append(eq.OptionSpans, [2]int{start, at + len(ids)})
		eq.OptionIDs = append(eq.OptionIDs, o.id)
		ids = append(ids, tok.Encode("\n")...)
	}
	ids = append(ids, tok.Encode("END FIELD\n")...)
	return eq, ids, nil
}

// options lists a question's allowed options in encoded order: a noul's
// true and false (default descriptions replaced key by key by criteria,
// other keys ignored); a choice's criteria sorted by id (code point order);
// a score's levels "0".."n-1". Missing or empty criteria give no options
// (Validate refuses that for choice and score); criteria of a shape Python
// could not iterate are errors.
func options(q *api.Question, t api.QuestionType) ([]option, error) {
	c := q.Criteria
	field := "questions." + q.ID + ".criteria"
	bad := func(pyType, pyText, want string) error {
		return refErr(http.StatusUnprocessableEntity, api.CodeValidation, field, pyType,
			fmt.Sprintf("%s: %s, got %s", field, want, c.Kind), pyText)
	}
	switch t {
	case api.Noul:
		opts := []option{{"true", pyjson.NewString(NoulTrue)}, {"false", pyjson.NewString(NoulFalse)}}
		if !c.Truthy() {
			return opts, nil
		}
		if c.Kind != pyjson.Object {
			return nil, bad("AttributeError", fmt.Sprintf("'%s' object has no attribute 'items'", pyTypeName(c)),
				"a noul's criteria must be an object with true and false")
		}
		for i, k := range c.Keys {
			switch k {
			case "true":
				opts[0].desc = c.Vals[i]
			case "false":
				opts[1].desc = c.Vals[i]
			}
		}
		return opts, nil
	case api.Choice:
		if c == nil {
			// sorted(question["criteria"].items()): the reference reads the
			// key without a default for a choice.
			return nil, refErr(http.StatusUnprocessableEntity, api.CodeValidation, field, "KeyError",
				fmt.Sprintf("question %q: a choice's criteria is required (KeyError 'criteria')", q.ID), "'criteria'")
		}
		if !c.Truthy() {
			return nil, nil
		}
		if c.Kind != pyjson.Object {
			return nil, bad("AttributeError", fmt.Sprintf("'%s' object has no attribute 'items'", pyTypeName(c)),
				"a choice's criteria must be an object of option id to description")
		}
		opts := make([]option, len(c.Keys))
		for i, k := range c.Keys {
			opts[i] = option{k, c.Vals[i]}
		}
		sort.Slice(opts, func(a, b int) bool { return opts[a].id < opts[b].id })
		return opts, nil
	default: // api.Score: enumerate(criteria)
		if !c.Truthy() {
			return nil, nil
		}
		var descs []*pyjson.Value
		switch c.Kind {
		case pyjson.Array:
			descs = c.Items
		case pyjson.Object: // iterating a dict yields its keys
			for _, k := range c.Keys {
				descs = append(descs, pyjson.NewString(k))
			}
		case pyjson.String: // iterating a str yields its characters
			for _, r := range c.Str {
				descs = append(descs, pyjson.NewString(string(r)))
			}
		default:
			return nil, bad("TypeError", fmt.Sprintf("'%s' object is not iterable", pyTypeName(c)),
				"a score's criteria must be an array of levels")
		}
		opts := make([]option, len(descs))
		for i, d := range descs {
			opts[i] = option{strconv.Itoa(i), d}
		}
		return opts, nil
	}
}

func refErr(status, code int, field, pyType, msg, pyText string) *api.Error {
	return &api.Error{Status: status, Code: code, Field: field, Message: msg, PyType: pyType, PyText: pyText}
}

// keyErr is the reference's KeyError for a missing required key.
func keyErr(key string) *api.Error {
	field := key
	if key == "type" {
		field = "questions.*.type"
	}
	return refErr(http.StatusUnprocessableEntity, api.CodeValidation, field, "KeyError",
		fmt.Sprintf("%s is required (KeyError '%s')", key, key), "'"+key+"'")
}

// pyTypeName is Python's type name of a decoded value.
func pyTypeName(v *pyjson.Value) string {
	switch v.Kind {
	case pyjson.Null:
		return "NoneType"
	case pyjson.Bool:
		return "bool"
	case pyjson.Int:
		return "int"
	case pyjson.Float:
		return "float"
	case pyjson.String:
		return "str"
	case pyjson.Array:
		return "list"
	}
	return "dict"
}

// pyStr is Python's str() of a decoded scalar (and a JSON rendering of
// containers, which is close enough for a record id).
func pyStr(v *pyjson.Value) string {
	switch v.Kind {
	case pyjson.String:
		return v.Str
	case pyjson.Null:
		return "None"
	case pyjson.Bool:
		if v.Bool {
			return "True"
		}
		return "False"
	case pyjson.Float:
		switch s := pyjson.FormatFloat(v.Num); s {
		case "NaN":
			return "nan"
		case "Infinity":
			return "inf"
		case "-Infinity":
			return "-inf"
		default:
			return s
		}
	}
	return pyjson.Render(v)
}

// pyRepr is Python's repr() of a decoded scalar: what str(KeyError(x))
// prints.
func pyRepr(v *pyjson.Value) string {
	if v.Kind != pyjson.String {
		return pyStr(v)
	}
	s := v.Str
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case !unicode.IsPrint(r) && r != ' ':
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}
