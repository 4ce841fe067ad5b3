package api

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/clefrt/clef/engine/pyjson"
)

// Hosted limits of the Workers AI route (spec §4.2, §4.4).
const (
	MaxQuestions     = 64
	MaxQuestionIDLen = 100
	MinChoiceOptions = 2
	MaxChoiceOptions = 255
	MinScoreLevels   = 2
	MaxScoreLevels   = 10
	MaxImages        = 4
	MaxAudio         = 4
	MaxVideos        = 2
	MaxImageBytes    = 4 << 20  // decoded, each
	MaxImagesBytes   = 8 << 20  // decoded, all images
	MaxAudioBytes    = 8 << 20  // decoded, each clip
	MaxVideoBytes    = 16 << 20 // decoded, each video
	MaxAVBytes       = 16 << 20 // decoded, audio and video together
	// MaxBodyBytes is where the hosted route answers 413: it estimates a
	// request at (body bytes)/4 tokens and refuses past 131,072.
	MaxBodyBytes = 4 * 131072
	// MaxMediaBodyBytes is what the media may add to a body on top of
	// MaxBodyBytes: their base64 text at the decoded limits (all images;
	// audio and videos together), with room for the JSON around it. The
	// hosted estimate counts text, not pictures and sound (images are
	// priced in tokens of their own), so a server reading bodies up to the
	// hosted limit reads this much more and checks the text part alone
	// (TextBodyBytes).
	MaxMediaBodyBytes = (MaxImagesBytes+MaxAVBytes)/3*4 + 64<<10
)

// Validate applies the reference request checks of Cloudflare's systemone(),
// in its order and with its messages (PyText/Message are the reference's
// str(ValueError)): model must be a string and state present; questions a
// non-empty object; each type noul, choice or score; a choice or score needs
// non-empty criteria. It does not limit counts or sizes: those are the
// hosted API's (ValidateHosted).
func (r *Request) Validate() error {
	ref := func(status, code int, field, msg string) error {
		return &Error{Status: status, Code: code, Field: field, Message: msg, PyType: "ValueError"}
	}
	if m := r.Doc.Get("model"); m == nil || m.Kind != pyjson.String {
		return ref(http.StatusUnprocessableEntity, CodeValidation, "model", "model and state are required")
	}
	if r.State == nil {
		return ref(http.StatusUnprocessableEntity, CodeValidation, "state", "model and state are required")
	}
	qs := r.Doc.Get("questions")
	if qs == nil || qs.Kind != pyjson.Object || len(qs.Keys) == 0 {
		return ref(http.StatusBadRequest, CodeBadRequest, "questions", "at least one question is required")
	}
	for _, q := range r.Questions {
		field := "questions." + q.ID
		if q.Raw.Kind != pyjson.Object {
			return &Error{Status: http.StatusUnprocessableEntity, Code: CodeValidation, Field: field,
				Message: fmt.Sprintf("%s: question must be an object, got %s", q.ID, q.Raw.Kind), PyType: "AttributeError"}
		}
		t, ok := ParseQuestionType(q.Type)
		if !ok {
			return ref(http.StatusBadRequest, CodeBadRequest, field+".type", q.ID+": type must be noul, choice, or score")
		}
		if t != Noul && !q.Criteria.Truthy() {
			return ref(http.StatusUnprocessableEntity, CodeValidation, field+".criteria", q.ID+": criteria must not be empty")
		}
	}
	return nil
}

// ValidateHosted applies Validate and then the limits of the hosted Workers AI
// route (@cf/cloudflare/clef-omni): model "clef-omni" (surrounding spaces
// allowed); 1-64 questions; ids of 1-100 characters from [A-Za-z0-9_.-];
// instructions required and non-empty (a string, or an object or array);
// choice 2-255 options with non-empty ids and string, object, array or null
// descriptions; score 2-10 levels; noul criteria an object of true/false;
// at most 4 images, 4 audio clips and 2 videos, each a data URL or
// {content_type, base64}, within the decoded size limits; and no unknown
// fields at the top level, in a question, in noul criteria or in a media
// object. Every error is a 422 (code 5012) naming the field and the rule.
// Pixel counts and durations need decoding and are checked by the media
// decoders.
func (r *Request) ValidateHosted() error {
	return r.validateHosted(nil)
}

// ValidateHostedLenient is ValidateHosted for a route that must answer every
// request the published JSON Schema accepts: the schema does not forbid
// members it does not name (an extra top-level field, a field inside a
// question, noul criteria or a media object), so those are not refused but
// returned in ignored (their dotted paths), for the caller to report. Every
// other hosted limit applies unchanged.
func (r *Request) ValidateHostedLenient() (ignored []string, err error) {
	ign := []string{}
	err = r.validateHosted(&ign)
	return ign, err
}

// validateHosted applies the hosted checks; with ign non-nil, unknown members
// are collected there instead of refused.
func (r *Request) validateHosted(ign *[]string) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if err := onlyKeys(r.Doc, "", ign, "model", "state", "questions", "images", "audio", "videos"); err != nil {
		return err
	}
	if strings.TrimSpace(r.Model) != "clef-omni" {
		return invalid("model", fmt.Sprintf("model: must be \"clef-omni\" on this route, got %q", r.Model))
	}
	if n := len(r.Questions); n > MaxQuestions {
		return invalid("questions", fmt.Sprintf("questions: at most %d questions, got %d", MaxQuestions, n))
	}
	for _, q := range r.Questions {
		if err := q.validateHosted(ign); err != nil {
			return err
		}
	}
	var avBytes int
	for _, m := range []struct {
		name, mediaType string
		v               *pyjson.Value
		max, each       int
	}{
		{"images", "image/", r.Images, MaxImages, MaxImageBytes},
		{"audio", "audio/", r.Audio, MaxAudio, MaxAudioBytes},
		{"videos", "video/", r.Videos, MaxVideos, MaxVideoBytes},
	} {
		total, err := validateMedia(m.name, m.mediaType, m.v, m.max, m.each, ign)
		if err != nil {
			return err
		}
		if m.name == "images" && total > MaxImagesBytes {
			return invalid("images", fmt.Sprintf("images: at most %d MiB decoded in all, got %d bytes", MaxImagesBytes>>20, total))
		}
		if m.name != "images" {
			avBytes += total
		}
	}
	if avBytes > MaxAVBytes {
		return invalid("videos", fmt.Sprintf("audio and videos: at most %d MiB decoded together, got %d bytes", MaxAVBytes>>20, avBytes))
	}
	return nil
}

// CheckBodySize refuses a body past the hosted route's token estimate
// (413, code 5021).
func CheckBodySize(n int) error {
	if n > MaxBodyBytes {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLong,
			Message: fmt.Sprintf("request too large: %d bytes is about %d tokens, more than %d", n, n/4, MaxBodyBytes/4)}
	}
	return nil
}

func (q *Question) validateHosted(ign *[]string) error {
	field := "questions." + q.ID
	if !validID(q.ID) {
		return invalid(field, fmt.Sprintf("questions: id %q must be 1-%d characters from A-Z a-z 0-9 _ . -", q.ID, MaxQuestionIDLen))
	}
	if err := onlyKeys(q.Raw, field, ign, "type", "instructions", "criteria"); err != nil {
		return err
	}
	in := q.Instructions
	switch {
	case in == nil || in.Kind == pyjson.Null:
		return invalid(field+".instructions", field+".instructions: required")
	case in.Kind == pyjson.String || in.Kind == pyjson.Object || in.Kind == pyjson.Array:
		if in.Len() == 0 {
			return invalid(field+".instructions", field+".instructions: must not be empty")
		}
	default:
		return invalid(field+".instructions", fmt.Sprintf("%s.instructions: must be a non-empty string, object or array, got %s", field, in.Kind))
	}
	t, _ := ParseQuestionType(q.Type)
	c := q.Criteria
	switch t {
	case Noul:
		if c == nil {
			return nil
		}
		if c.Kind != pyjson.Object {
			return invalid(field+".criteria", fmt.Sprintf("%s.criteria: a noul's criteria must be an object with true and false, got %s", field, c.Kind))
		}
		return onlyKeys(c, field+".criteria", ign, "true", "false")
	case Choice:
		if c.Kind != pyjson.Object {
			return invalid(field+".criteria", fmt.Sprintf("%s.criteria: a choice's criteria must be an object of option id to description, got %s", field, c.Kind))
		}
		if n := len(c.Keys); n < MinChoiceOptions || n > MaxChoiceOptions {
			return invalid(field+".criteria", fmt.Sprintf("%s.criteria: a choice needs %d to %d options, got %d", field, MinChoiceOptions, MaxChoiceOptions, n))
		}
		for i, id := range c.Keys {
			if id == "" {
				return invalid(field+".criteria", field+".criteria: option ids must be non-empty")
			}
			switch k := c.Vals[i].Kind; k {
			case pyjson.String, pyjson.Object, pyjson.Array, pyjson.Null:
			default:
				return invalid(field+".criteria."+id, fmt.Sprintf("%s.criteria.%s: a description must be a string, object, array or null, got %s", field, id, k))
			}
		}
	case Score:
		if c.Kind != pyjson.Array {
			return invalid(field+".criteria", fmt.Sprintf("%s.criteria: a score's criteria must be an array of levels, got %s", field, c.Kind))
		}
		if n := len(c.Items); n < MinScoreLevels || n > MaxScoreLevels {
			return invalid(field+".criteria", fmt.Sprintf("%s.criteria: a score needs %d to %d levels, got %d", field, MinScoreLevels, MaxScoreLevels, n))
		}
	}
	return nil
}

func validID(id string) bool {
	if id == "" || len(id) > MaxQuestionIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// onlyKeys rejects members of object v other than allowed, or, with ign
// non-nil, appends their paths to *ign.
func onlyKeys(v *pyjson.Value, field string, ign *[]string, allowed ...string) error {
	for _, k := range v.Keys {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			at := k
			if field != "" {
				at = field + "." + k
			}
			if ign != nil {
				*ign = append(*ign, at)
				continue
			}
			return invalid(at, fmt.Sprintf("%s: unknown field (allowed: %s)", at, strings.Join(allowed, ", ")))
		}
	}
	return nil
}

// validateMedia checks one media list and returns its decoded size.
func validateMedia(name, mediaType string, v *pyjson.Value, maxItems, maxEach int, ign *[]string) (int, error) {
	if v == nil {
		return 0, nil
	}
	if v.Kind != pyjson.Array {
		return 0, invalid(name, fmt.Sprintf("%s: must be an array, got %s", name, v.Kind))
	}
	if len(v.Items) > maxItems {
		return 0, invalid(name, fmt.Sprintf("%s: at most %d items, got %d", name, maxItems, len(v.Items)))
	}
	total := 0
	for i, it := range v.Items {
		field, label := fmt.Sprintf("%s.%d", name, i), fmt.Sprintf("%s[%d]", name, i)
		var size int
		switch it.Kind {
		case pyjson.String:
			s := it.Str
			if name == "images" {
				if len(s) < 5 || !strings.EqualFold(s[:5], "data:") {
					return 0, invalid(field, label+": must be a data: URL (remote URLs are not accepted)")
				}
			} else if !strings.HasPrefix(s, "data:"+mediaType) {
				return 0, invalid(field, fmt.Sprintf("%s: must be a data:%s... URL", label, mediaType))
			}
			comma := strings.IndexByte(s, ',')
			if comma < 0 {
				return 0, invalid(field, label+": data URL has no ',' before its payload")
			}
			if strings.HasSuffix(strings.ToLower(s[:comma]), ";base64") {
				size = base64Len(s[comma+1:])
			} else {
				size = len(s) - comma - 1
			}
		case pyjson.Object:
			if err := onlyKeys(it, field, ign, "content_type", "base64"); err != nil {
				return 0, err
			}
			ct, b64 := it.Get("content_type"), it.Get("base64")
			if ct == nil || ct.Kind != pyjson.String || b64 == nil || b64.Kind != pyjson.String {
				return 0, invalid(field, label+": needs string content_type and base64")
			}
			if !strings.HasPrefix(strings.ToLower(ct.Str), mediaType) {
				return 0, invalid(field+".content_type", fmt.Sprintf("%s.content_type: must be %s*, got %q", label, mediaType, ct.Str))
			}
			size = base64Len(b64.Str)
		default:
			return 0, invalid(field, fmt.Sprintf("%s: must be a data URL or {content_type, base64}, got %s", label, it.Kind))
		}
		if size > maxEach {
			return 0, invalid(field, fmt.Sprintf("%s: at most %d MiB decoded, got %d bytes", label, maxEach>>20, size))
		}
		total += size
	}
	return total, nil
}

// base64Len is the decoded length of base64 text, ignoring whitespace and
// padding.
func base64Len(s string) int {
	n := 0
	for _, r := range s {
		if r == '=' || r == ' ' || r == '\n' || r == '\r' || r == '\t' {
			continue
		}
		n += utf8.RuneLen(r)
	}
	return n * 3 / 4
}
