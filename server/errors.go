package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/clefrt/clef/engine/api"
)

// Workers AI codes the server itself gives (the request ones come with
// *api.Error).
const (
	codeNoRoute      = 7000  // 400: no such model route
	codeUnauthorized = 10000 // 401: missing or wrong bearer token
	codeForbidden    = 10000 // 403/421: a Host, Origin or site the daemon does not serve
	codeTimeout      = 3046  // 504: the decision did not finish in time
)

// httpError is a refusal or failure as both protocols render it.
type httpError struct {
	Status     int
	Code       int // Workers AI code
	Field      string
	Message    string
	RetryAfter int // seconds; 0 omits the header
}

func (e *httpError) Error() string { return e.Message }

// toHTTPError maps any error of a request's path to its HTTP answer.
// Internal failures become a 500 that names the request id, not the cause.
func toHTTPError(err error) (he *httpError, internal bool) {
	var ae *api.Error
	var nr *errNotReady
	var pe *panicError
	switch {
	case errors.As(err, &he):
		return he, false
	case errors.As(err, &ae):
		status := ae.Status
		if status < 400 || status > 499 {
			status = http.StatusUnprocessableEntity
		}
		code := ae.Code
		if code == 0 {
			code = api.CodeValidation
		}
		return &httpError{Status: status, Code: code, Field: ae.Field, Message: ae.Message}, false
	case errors.As(err, &nr):
		return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: nr.reason, RetryAfter: 5}, false
	case errors.Is(err, errClosing):
		return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: err.Error()}, false
	case errors.Is(err, context.DeadlineExceeded):
		return &httpError{Status: http.StatusGatewayTimeout, Code: codeTimeout, Message: "the decision did not finish before the request deadline"}, false
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer.
		return &httpError{Status: 499, Code: codeTimeout, Message: "request cancelled by the client"}, false
	case errors.As(err, &pe):
		return &httpError{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error"}, true
	}
	return &httpError{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "inference failed"}, true
}

// protocol is the wire format of a route.
type protocol int

const (
	systemOne protocol = iota // {"error": {...}} on failure, the bare response on success
	workersAI                 // {result, success, errors, messages}
)

// envelope is Cloudflare's REST envelope.
type envelope struct {
	Result   json.RawMessage `json:"result"`
	Success  bool            `json:"success"`
	Errors   []envError      `json:"errors"`
	Messages []string        `json:"messages"`
}

type envError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type systemOneError struct {
	Error struct {
		Message   string `json:"message"`
		Field     string `json:"field,omitempty"`
		Code      int    `json:"code"`
		RequestID string `json:"request_id,omitempty"`
	} `json:"error"`
}

// writeError renders e in the route's protocol.
func writeError(w http.ResponseWriter, p protocol, e *httpError, reqID string) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	msg := e.Message
	if e.Status == http.StatusInternalServerError && reqID != "" {
		msg += " (request id " + reqID + ")"
	}
	var body []byte
	if p == workersAI {
		body, _ = json.Marshal(envelope{Result: json.RawMessage("null"), Errors: []envError{{Code: e.Code, Message: msg}}, Messages: []string{}})
	} else {
		var se systemOneError
		se.Error.Message, se.Error.Field, se.Error.Code, se.Error.RequestID = msg, e.Field, e.Code, reqID
		body, _ = json.Marshal(se)
	}
	writeJSON(w, e.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(body)
	w.Write([]byte("\n"))
}
