// Package oauth is the OAuth 2.1 core: the error type every endpoint answers with, client
// authentication, the token endpoint with one handler per grant type, token issuance, and the
// metadata, JWKS, revocation, introspection and userinfo endpoints.
package oauth

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strconv"

	"latchkey.dev/latchkey/internal/requestid"
	"latchkey.dev/latchkey/webhook/pages"
)

// Error is an OAuth error response (RFC 6749 §5.2 and the RFCs that add codes). Values are
// copied, never mutated: WithDescription and WithExtra return new values.
type Error struct {
	Code        string
	Description string
	// Status is the HTTP status; 400 when zero.
	Status int
	// Extra members are added to the JSON object (the token-exchange refusal adds reason,
	// connect_uri, …). They never replace error or error_description.
	Extra map[string]any

	cause error
}

// Predefined errors. Use them with WithDescription.
var (
	ErrInvalidRequest         = Error{Code: "invalid_request", Status: http.StatusBadRequest}
	ErrInvalidClient          = Error{Code: "invalid_client", Status: http.StatusUnauthorized}
	ErrInvalidGrant           = Error{Code: "invalid_grant", Status: http.StatusBadRequest}
	ErrUnauthorizedClient     = Error{Code: "unauthorized_client", Status: http.StatusBadRequest}
	ErrUnsupportedGrantType   = Error{Code: "unsupported_grant_type", Status: http.StatusBadRequest}
	ErrInvalidScope           = Error{Code: "invalid_scope", Status: http.StatusBadRequest}
	ErrInvalidTarget          = Error{Code: "invalid_target", Status: http.StatusBadRequest} // RFC 8707
	ErrAccessDenied           = Error{Code: "access_denied", Status: http.StatusForbidden}
	ErrUnsupportedTokenType   = Error{Code: "unsupported_token_type", Status: http.StatusBadRequest} // RFC 7009
	ErrInvalidToken           = Error{Code: "invalid_token", Status: http.StatusUnauthorized}        // RFC 6750
	ErrInvalidRedirectURI     = Error{Code: "invalid_redirect_uri", Status: http.StatusBadRequest}   // RFC 7591
	ErrInvalidClientMetadata  = Error{Code: "invalid_client_metadata", Status: http.StatusBadRequest}
	ErrNotFound               = Error{Code: "not_found", Status: http.StatusNotFound, Description: "no such project"}
	ErrMethodNotAllowed       = Error{Code: "invalid_request", Status: http.StatusMethodNotAllowed}
	ErrRequestTooLarge        = Error{Code: "invalid_request", Status: http.StatusRequestEntityTooLarge, Description: "request body too large"}
	ErrServerError            = Error{Code: "server_error", Status: http.StatusInternalServerError, Description: "internal error"}
	ErrTemporarilyUnavailable = Error{Code: "temporarily_unavailable", Status: http.StatusServiceUnavailable}
	ErrRegistrationNotAllowed = Error{Code: "access_denied", Status: http.StatusForbidden, Description: "this project does not accept client registrations"}
)

func (e Error) Error() string {
	if e.Description == "" {
		return e.Code
	}
	return e.Code + ": " + e.Description
}

// Unwrap returns the internal cause of a server_error, for logs.
func (e Error) Unwrap() error { return e.cause }

// WithDescription returns a copy with the description set. The text goes to the client, so it
// must never carry internal detail or secrets.
func (e Error) WithDescription(d string) Error {
	e.Description = d
	return e
}

// WithStatus returns a copy with another HTTP status.
func (e Error) WithStatus(status int) Error {
	e.Status = status
	return e
}

// WithExtra returns a copy with additional JSON members.
func (e Error) WithExtra(extra map[string]any) Error {
	m := make(map[string]any, len(e.Extra)+len(extra))
	maps.Copy(m, e.Extra)
	maps.Copy(m, extra)
	e.Extra = m
	return e
}

// Internal wraps an unexpected failure as server_error; the cause is for the log only.
func Internal(cause error) Error {
	e := ErrServerError
	e.cause = cause
	return e
}

// AsError converts any error to an Error; anything that is not one becomes server_error.
func AsError(err error) Error {
	var e Error
	if errors.As(err, &e) {
		return e
	}
	return Internal(err)
}

// WriteError is the one place an OAuth error reaches the wire: RFC 6749 §5.2 JSON, never
// cached, with the authentication challenge RFC 6749 §5.2 and RFC 6750 §3 ask for.
func WriteError(w http.ResponseWriter, err error) {
	e := AsError(err)
	status := e.Status
	if status == 0 {
		status = http.StatusBadRequest
	}
	h := w.Header()
	switch {
	case e.Code == "invalid_client" && status == http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Basic realm="latchkey", charset="UTF-8"`)
	case e.Code == "invalid_token" && status == http.StatusUnauthorized && h.Get("WWW-Authenticate") == "":
		// A DPoP refusal has set its own challenge (RFC 9449 §7.1).
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`+describe(e.Description))
	}
	body := make(map[string]any, 2+len(e.Extra))
	for k, v := range e.Extra {
		body[k] = v
	}
	body["error"] = e.Code
	// An extension member (RFC 6749 §5.2 clients ignore members they do not know): the id a
	// developer quotes to the operator, the same as the X-Request-Id header.
	if id := h.Get(requestid.Header); id != "" {
		body["request_id"] = id
	}
	if e.Description != "" {
		body["error_description"] = e.Description
	}
	writeJSON(w, status, body)
}

func describe(d string) string {
	if d == "" {
		return ""
	}
	// The description is our own text; quote marks and backslashes are the only characters
	// that could break the quoted-string.
	b := make([]byte, 0, len(d))
	for i := 0; i < len(d); i++ {
		if c := d[i]; c != '"' && c != '\\' && c >= 0x20 && c < 0x7f {
			b = append(b, c)
		}
	}
	return `, error_description="` + string(b) + `"`
}

// WriteJSON writes a successful JSON response that is never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	writeJSON(w, status, v)
}

// jsonType is the Content-Type of every JSON answer, one slice for all (see pages.NoStore).
var jsonType = []string{"application/json"}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":"server_error"}`)
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h["Content-Type"] = jsonType
	h.Set("Content-Length", strconv.Itoa(len(b)))
	pages.NoStore(h)
	w.WriteHeader(status)
	w.Write(b)
}
