package proxy_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// A call through the proxy that token exchange's decision refuses is audited as
// token.proxy_refused, with exchange's reason and the agent, never as a refused exchange: the
// audit log tells an agent's refused call from a refused token request.
func TestProxyRefusalIsAudited(t *testing.T) {
	f := newFixture(t)
	mallory := f.s.AccessToken(stack.MalloryEmail, stack.Agent)
	const calls = 2
	for range calls {
		if resp, body := f.call(t, http.MethodGet, "/user", mallory, nil); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%d %s, want 403 connect_required", resp.StatusCode, body)
		}
	}
	var refused []store.AuditRecord
	// The records are written behind the answer (events.WrittenBehind): wait for them.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		all, err := f.s.Admin.ListAudit(context.Background(), stack.ProjectKey, 100)
		must(t, err)
		refused = refused[:0]
		for _, r := range all {
			switch r.Action {
			case events.TokenProxyRefused:
				refused = append(refused, r)
			case events.TokenExchangeRefused:
				t.Fatalf("a refused proxied call was audited as a refused exchange: %+v", r)
			}
		}
		if len(refused) >= calls {
			break
		}
	}
	if len(refused) != calls {
		t.Fatalf("%d token.proxy_refused records, want %d", len(refused), calls)
	}
	r := refused[0]
	if r.Reason != "connect_required" || r.Outcome != store.OutcomeRefused || r.Target != f.s.PersonID(stack.MalloryEmail) ||
		r.ClientID != stack.Agent || r.Details["agent"] != stack.Agent || r.Connector != f.s.Connector.Key {
		t.Fatalf("record %+v", r)
	}
}
