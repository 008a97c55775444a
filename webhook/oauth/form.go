package oauth

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
)

// MaxFormBytes bounds a form body at the token, revocation and introspection endpoints; the
// largest legitimate one (a token exchange carrying a JWT) is a few kilobytes.
const MaxFormBytes = 64 << 10

// repeatable are parameters RFC 8707 and RFC 8693 let a client send more than once.
var repeatable = map[string]bool{"resource": true, "audience": true}

// ReadForm reads an application/x-www-form-urlencoded POST body. Query parameters are
// ignored: credentials and codes belong in the body. A parameter sent twice is refused
// (RFC 6749 §3.2), except those the RFCs allow to repeat, and an empty value counts as absent.
func ReadForm(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		return nil, ErrMethodNotAllowed.WithDescription("use POST")
	}
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/x-www-form-urlencoded" {
		return nil, ErrInvalidRequest.WithDescription("the body must be application/x-www-form-urlencoded")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxFormBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, ErrRequestTooLarge
		}
		return nil, ErrInvalidRequest.WithDescription("cannot read the request body")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, ErrInvalidRequest.WithDescription("the body is not a valid form")
	}
	return form, CheckRepeats(form)
}

// CheckRepeats refuses parameters sent more than once, except those allowed to repeat.
func CheckRepeats(form url.Values) error {
	for k, v := range form {
		if len(v) > 1 && !repeatable[k] {
			return ErrInvalidRequest.WithDescription("parameter " + safeName(k) + " is repeated")
		}
	}
	return nil
}

// safeName echoes a parameter name back only when it is short and plain.
func safeName(k string) string {
	if len(k) > 40 {
		return "(long name)"
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c == '-' || c == '.' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return "(unprintable name)"
		}
	}
	return k
}
