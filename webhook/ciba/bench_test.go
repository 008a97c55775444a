package ciba_test

import (
	"net/http"
	"net/url"
	"testing"

	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/ciba"
)

// BenchmarkPollPending is an agent's poll of a request nobody answered yet, through the whole
// server on SQLite: client authentication, the row lock, the poll time written back.
func BenchmarkPollPending(b *testing.B) {
	s := newStackB(b)
	a := s.MustPost(ciba.Path, url.Values{"login_hint": {stack.AliceEmail}, "scope": {"openid"}}, opsBot, opsBotSecret)
	if a.Status != http.StatusOK {
		b.Fatalf("ask: %d %s", a.Status, a.Raw)
	}
	form := url.Values{"grant_type": {ciba.GrantType}, "auth_req_id": {a.Str("auth_req_id")}}
	b.ResetTimer()
	for b.Loop() {
		if r := s.MustPost("/token", form, opsBot, opsBotSecret); r.Status != http.StatusBadRequest {
			b.Fatalf("poll: %d %s", r.Status, r.Raw)
		}
	}
}
