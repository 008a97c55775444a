package register_test

import (
	"net/http"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// sendJSON sends a JSON body with the registration access token, as a client managing its
// registration (RFC 7592) does.
func sendJSON(s *stack.Stack, method, uri, token, body string) stack.Answer {
	s.T.Helper()
	req, _ := http.NewRequest(method, uri, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return s.Send(req)
}

// The client's side: dynamic registration, its updates and deletion, and the redirect policy
// refusing it at consent and at refresh.
func TestAuditTrailOfClients(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	sink := s.NewAuditSink()
	r := s.Register(`{"client_name":"Helper","redirect_uris":["https://helper.example/cb"],"token_endpoint_auth_method":"none"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("register: %s", r.Raw)
	}
	id, tok, uri := r.Str("client_id"), r.Str("registration_access_token"), r.Str("registration_client_uri")
	if u := sendJSON(s, http.MethodPut, uri, tok, `{"client_id":"`+id+`","client_name":"Helper 2","redirect_uris":["https://helper.example/cb"],"token_endpoint_auth_method":"none"}`); u.Status != http.StatusOK {
		t.Fatalf("update: %s", u.Raw)
	}

	// Alice has a refresh token for "web"; then only recognised apps may connect.
	b := s.Browser()
	first := s.CodeFlowAs(b, stack.Web, stack.WebSecret, "read", stack.AliceEmail, stack.AlicePassword)
	s.OnlyRecognisedApps(true)
	if p := b.MustGet(s.AuthorizeURL(id, "https://helper.example/cb", "read", stack.NewPKCE(), nil)); p.Status != http.StatusForbidden {
		t.Fatalf("consent under the policy: %d", p.Status)
	}
	if r := s.RefreshAs(stack.Web, stack.WebSecret, first.Str("refresh_token")); r.Status != http.StatusBadRequest {
		t.Fatalf("refresh under the policy: %d", r.Status)
	}
	req, _ := http.NewRequest(http.MethodDelete, uri, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if d := s.Send(req); d.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", d.Status, d.Raw)
	}
	recs := s.TrailTo(sink, "client.registered", "client.updated", "client.deleted", events.ConsentRefusedByPolicy, "refresh.refused")
	for _, a := range []string{"client.registered", "client.updated", "client.deleted"} {
		stack.ExpectAudit(t, recs[a], "client:"+id, id, id, store.OutcomeSuccess, "")
	}
	alice := s.AuditOf(events.SignInSucceeded)[0].Actor
	stack.ExpectAudit(t, recs[events.ConsentRefusedByPolicy], alice, id, id, store.OutcomeRefused, "only_recognised_apps")
	stack.ExpectAudit(t, recs["refresh.refused"], "client:web", alice, "web", store.OutcomeRefused, "only_recognised_apps")
}
