package oauth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWriteError(t *testing.T) {
	refusal := ErrInvalidGrant.WithDescription("the person has not connected a GitHub account").WithExtra(map[string]any{
		"reason": "connect_required", "connect_uri": "https://auth.example/account/services/link/x", "connect_expires_in": 1800,
		"error": "must not override",
	})
	w := httptest.NewRecorder()
	WriteError(w, refusal)
	var body map[string]any
	json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != 400 || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Pragma") != "no-cache" ||
		body["error"] != "invalid_grant" || body["reason"] != "connect_required" || body["connect_expires_in"] != float64(1800) {
		t.Errorf("%d %v %s", w.Code, w.Header(), w.Body)
	}
	if ErrInvalidGrant.Description != "" || ErrInvalidGrant.Extra != nil {
		t.Error("WithDescription/WithExtra changed the predefined error")
	}

	w = httptest.NewRecorder()
	WriteError(w, ErrInvalidClient.WithDescription("x"))
	if w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
		t.Errorf("invalid_client: %d %v", w.Code, w.Header())
	}
	w = httptest.NewRecorder()
	WriteError(w, errPlain("database exploded at 10.0.0.3"))
	if w.Code != 500 || json.Unmarshal(w.Body.Bytes(), &body) != nil || body["error_description"] != "internal error" {
		t.Errorf("internal errors must not leak: %s", w.Body)
	}
}

type errPlain string

func (e errPlain) Error() string { return string(e) }

func TestBasicAuth(t *testing.T) {
	for hdr, want := range map[string][3]string{
		"Basic YTpi":                       {"a", "b", "ok"},
		"basic YTpi":                       {"a", "b", "ok"},
		"Basic YSUzQWI6YytkJTI1":           {"a:b", "c d%", "ok"}, // a%3Ab:c+d%25
		"Basic !!!":                        {"", "", "err"},
		"Basic YWI=":                       {"", "", "err"}, // no colon
		"Bearer x":                         {"", "", "none"},
		"Basic " + "JXp6OmI=" /* %zz:b */ : {"", "", "err"},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", hdr)
		id, sec, ok, err := basicAuth(r)
		state := "ok"
		if err != nil {
			state = "err"
		} else if !ok {
			state = "none"
		}
		if state != want[2] || (state == "ok" && (id != want[0] || sec != want[1])) {
			t.Errorf("%q: %q %q %s", hdr, id, sec, state)
		}
	}
}

func TestParseScope(t *testing.T) {
	for in, want := range map[string]int{"": 0, "a b  a": 2, "read:x write": 2} {
		s, err := ParseScope(in)
		if err != nil || len(s) != want {
			t.Errorf("ParseScope(%q) = %v %v", in, s, err)
		}
	}
	for _, bad := range []string{"a\"b", "a\\b", "é"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
}

func TestPKCE(t *testing.T) {
	// RFC 7636 Appendix B.
	if !VerifyS256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM") {
		t.Error("RFC 7636 example does not verify")
	}
	if ValidVerifier("short") || !ValidChallenge("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM") {
		t.Error("format checks")
	}
}
