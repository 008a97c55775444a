package pages

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRenderEveryPage(t *testing.T) {
	p, err := New("/-/static/")
	if err != nil {
		t.Fatal(err)
	}
	f := Frame{Title: "T", Project: "Demo <Team>", SignedInAs: "a@example.com"}
	for name, render := range map[string]func(*httptest.ResponseRecorder){
		"signin": func(w *httptest.ResponseRecorder) {
			p.SignIn(w, 200, SignInData{Frame: f, Passwords: true, OIDCURL: "/x", CSRF: "c"})
		},
		"consent": func(w *httptest.ResponseRecorder) {
			p.Consent(w, 200, ConsentData{Frame: f, AppName: "<script>", Registered: true, Destination: Destination{URI: "https://a.example/cb", ConfirmRequired: true}})
		},
		"error": func(w *httptest.ResponseRecorder) { p.Error(w, 400, ErrorData{Frame: f, Message: "m"}) },
		// A Connector's hint is its team's text: escaped like every other.
		"apikey": func(w *httptest.ResponseRecorder) {
			p.APIKey(w, 400, APIKeyData{Frame: f, Heading: "h", Service: "S", Hint: "<script>", Agent: "<script>", Action: "/x", Back: "/y", CSRF: "c", Error: "e"})
		},
		"message": func(w *httptest.ResponseRecorder) {
			p.Message(w, 200, MessageData{Frame: f, Continue: "/team/demo/authorize?a=1&b=2", Actions: []Action{{Label: "Go", URL: "/x", Post: true}}})
		},
	} {
		w := httptest.NewRecorder()
		render(w)
		body := w.Body.String()
		if !strings.Contains(body, "Demo &lt;Team&gt;") || strings.Contains(body, "<script>") || !strings.Contains(body, `href="/-/static/latchkey.css"`) {
			t.Errorf("%s: %s", name, body)
		}
		if w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("%s: content type", name)
		}
	}
	w := httptest.NewRecorder()
	p.Message(w, 200, MessageData{Continue: "/team/demo/authorize?a=1&b=2"})
	if !strings.Contains(w.Body.String(), `<meta http-equiv="refresh" content="0; url=/team/demo/authorize?a=1&amp;b=2">`) {
		t.Errorf("meta refresh: %s", w.Body)
	}
	w = httptest.NewRecorder()
	p.Message(w, 200, MessageData{Continue: "javascript:alert(1)"})
	if strings.Contains(w.Body.String(), "javascript:") {
		t.Errorf("unsafe continue URL rendered: %s", w.Body)
	}
}

func TestAllowFormTargets(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Content-Security-Policy", CSP)
	AllowFormTargets(w, "https://app.example")
	if got := w.Header().Get("Content-Security-Policy"); !strings.Contains(got, "form-action 'self' https://app.example;") || !strings.Contains(got, "frame-ancestors 'none'") {
		t.Errorf("%q", got)
	}
}
