// Package api holds the SystemOne wire types of a Clef decision (request,
// response, the Workers AI envelope), decodes requests exactly as Python's
// json.loads does, validates them at two levels (the reference checks of
// Cloudflare's systemone(), and the hosted Workers AI limits), and maps the
// model's probabilities to SystemOne answers.
//
// Unknown fields: the reference ignores them, so ParseRequest and Validate
// keep and ignore them too; ValidateHosted (the Workers AI route, --strict)
// rejects them, as the hosted API does (422, code 5012).
package api

import (
	"encoding/base64"
	"fmt"
	"net/http"

	"github.com/clefrt/clef/engine/pyjson"
)

// QuestionType is the reference's integer for a question type
// (QUESTION_TYPES): noul 0, choice 1, score 2.
type QuestionType int

// The question types.
const (
	Noul   QuestionType = 0
	Choice QuestionType = 1
	Score  QuestionType = 2
)

// String returns "noul", "choice" or "score".
func (t QuestionType) String() string {
	switch t {
	case Noul:
		return "noul"
	case Choice:
		return "choice"
	case Score:
		return "score"
	}
	return "unknown"
}

// ParseQuestionType maps "noul", "choice" or "score" to its type.
func ParseQuestionType(s string) (QuestionType, bool) {
	switch s {
	case "noul":
		return Noul, true
	case "choice":
		return Choice, true
	case "score":
		return Score, true
	}
	return 0, false
}

// Request is one SystemOne request, decoded with key order and number
// literals preserved. ParseRequest only requires a JSON object: fields of the
// wrong type are kept as they came so that Validate, ValidateHosted and the
// record encoder can each refuse them with the reference's own error.
// Build it with ParseRequest or FromValue: the checks and the encoder read
// Doc.
type Request struct {
	// Model is the "model" field when it is a string ("" otherwise; see Doc).
	Model string
	// State is the "state" field, nil when the key is missing.
	State *pyjson.Value
	// Questions are the members of "questions" in request order; nil when
	// "questions" is missing or not an object (see Doc).
	Questions []Question
	// Images, Audio and Videos are the media fields as sent, nil when missing.
	Images, Audio, Videos *pyjson.Value
	// Doc is the whole decoded request.
	Doc *pyjson.Value
}

// Question is one member of the request's "questions" object.
type Question struct {
	ID string
	// Type is the "type" field when it is a string, "" otherwise.
	Type string
	// Instructions and Criteria are the fields as sent, nil when missing.
	Instructions *pyjson.Value
	Criteria     *pyjson.Value
	// Raw is the question value as sent (normally an object).
	Raw *pyjson.Value
}

// ParseRequest decodes a request body. It fails (400, code 6003) when the
// body is not JSON or not a JSON object; every other check is left to
// Validate and ValidateHosted.
func ParseRequest(body []byte) (*Request, error) {
	doc, err := pyjson.Decode(body)
	if err != nil {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeNotJSON, Message: "request is not valid JSON: " + err.Error()}
	}
	if doc.Kind != pyjson.Object {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeNotJSON, Message: "request must be a JSON object, got " + doc.Kind.String()}
	}
	return FromValue(doc), nil
}

// FromValue builds a Request over an already decoded JSON object.
func FromValue(doc *pyjson.Value) *Request {
	r := &Request{Doc: doc}
	if m := doc.Get("model"); m != nil && m.Kind == pyjson.String {
		r.Model = m.Str
	}
	r.State = doc.Get("state")
	r.Images = doc.Get("images")
	r.Audio = doc.Get("audio")
	r.Videos = doc.Get("videos")
	if qs := doc.Get("questions"); qs != nil && qs.Kind == pyjson.Object {
		r.Questions = make([]Question, len(qs.Keys))
		for i, id := range qs.Keys {
			q := Question{ID: id, Raw: qs.Vals[i]}
			if t := q.Raw.Get("type"); t != nil && t.Kind == pyjson.String {
				q.Type = t.Str
			}
			q.Instructions = q.Raw.Get("instructions")
			q.Criteria = q.Raw.Get("criteria")
			r.Questions[i] = q
		}
	}
	return r
}

// RefuseMedia returns a 422 naming the first of the given media fields
// ("images", "audio", "videos"; all three when none is given) that the
// request carries (anything Python's `record.get(field) or []` would
// iterate), with why in words: for a runtime or a model that cannot read
// that kind of input. Media are never silently ignored.
func (r *Request) RefuseMedia(why string, fields ...string) error {
	if len(fields) == 0 {
		fields = []string{"images", "audio", "videos"}
	}
	for _, f := range fields {
		if r.media(f).Truthy() {
			return &Error{Status: http.StatusUnprocessableEntity, Code: CodeValidation, Field: f,
				Message: f + ": " + why}
		}
	}
	return nil
}

// media returns the request's media list named field.
func (r *Request) media(field string) *pyjson.Value {
	switch field {
	case "images":
		return r.Images
	case "audio":
		return r.Audio
	case "videos":
		return r.Videos
	}
	return nil
}

// TextBodyBytes is n, the length of the request's body, less the text of
// its media items (data URLs and base64 members): what the hosted API's
// (body bytes)/4 token estimate applies to.
func (r *Request) TextBodyBytes(n int) int {
	for _, f := range []string{"images", "audio", "videos"} {
		for _, it := range r.MediaItems(f) {
			n -= len(it.URL) + len(it.Base64)
		}
	}
	return max(n, 0)
}

// MediaItem is one item of a media list as the request sent it: a data
// URL, or the {content_type, base64} object form.
type MediaItem struct {
	URL                 string // the data URL ("" for the object form)
	ContentType, Base64 string // the object form's members
}

// MediaItems returns the items of the media list named field ("images",
// "audio", "videos") of a validated request (see Validate): nil when the
// field is missing, null or empty.
func (r *Request) MediaItems(field string) []MediaItem {
	v := r.media(field)
	if v == nil || v.Kind != pyjson.Array {
		return nil
	}
	items := make([]MediaItem, 0, len(v.Items))
	for _, it := range v.Items {
		switch it.Kind {
		case pyjson.String:
			items = append(items, MediaItem{URL: it.Str})
		case pyjson.Object:
			var m MediaItem
			if ct := it.Get("content_type"); ct != nil && ct.Kind == pyjson.String {
				m.ContentType = ct.Str
			}
			if b := it.Get("base64"); b != nil && b.Kind == pyjson.String {
				m.Base64 = b.Str
			}
			items = append(items, m)
		}
	}
	return items
}

// AddMedia appends an item {content_type, base64} holding data to the
// media list named field ("images", "audio" or "videos") of the request,
// creating the list when the request has none (a null list is replaced):
// how clef decide attaches local files. A field that is present but not a
// list is an error (the request is left as it was).
func (r *Request) AddMedia(field, contentType string, data []byte) error {
	switch field {
	case "images", "audio", "videos":
	default:
		return fmt.Errorf("no media field %q", field)
	}
	list := r.Doc.Get(field)
	switch {
	case list == nil || list.Kind == pyjson.Null:
		list = &pyjson.Value{Kind: pyjson.Array}
		r.Doc.Set(field, list)
	case list.Kind != pyjson.Array:
		return fmt.Errorf("%s: the request's %s is %s, not a list", field, field, list.Kind)
	}
	item := pyjson.NewObject()
	item.Set("content_type", pyjson.NewString(contentType))
	item.Set("base64", pyjson.NewString(base64.StdEncoding.EncodeToString(data)))
	list.Items = append(list.Items, item)
	*r = *FromValue(r.Doc)
	return nil
}
