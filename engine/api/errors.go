package api

import "net/http"

// Workers AI error codes (spec §4.4) carried by Error.Code.
const (
	CodeNotJSON     = 6003 // 400: the body is not JSON
	CodeBadRequest  = 5006 // 400: no questions, unknown question type
	CodeValidation  = 5012 // 422: a field breaks a rule
	CodeTooLong     = 5021 // 413: the request does not fit the context
	CodeInternal    = 5012 // 529/500: inference failed (Workers AI reuses 5012)
	CodeUnavailable = 3040 // 429/503: capacity
)

// Error is a request the runtime refuses. It carries what a server needs to
// answer it (HTTP status and Workers AI code), the field at fault, and a
// one-line message naming the field and the rule.
type Error struct {
	Status  int    // HTTP status: 400, 413 or 422
	Code    int    // Workers AI error code
	Field   string // dotted path of the offending field ("questions.q1.criteria"); "" for the whole body
	Message string // one line naming the field and the rule

	// PyType and PyText are the reference's exception class ("ValueError",
	// "KeyError") and its str(exception), set when the error reproduces one
	// raised by Cloudflare's systemone() or encode_record().
	PyType string
	PyText string
}

func (e *Error) Error() string { return e.Message }

// Python returns the reference's str(exception) for this error: PyText when
// set, else Message.
func (e *Error) Python() string {
	if e.PyText != "" {
		return e.PyText
	}
	return e.Message
}

// StatusText is the HTTP reason phrase of e.Status.
func (e *Error) StatusText() string { return http.StatusText(e.Status) }

// invalid builds a 422 validation error.
func invalid(field, msg string) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeValidation, Field: field, Message: msg}
}
