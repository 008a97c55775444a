package oauth

import (
	"context"
	"strings"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// recordIssued writes token.issued for tokens just stored by grant grantType. Every grant is
// recorded, client_credentials included: it is the only trace of a machine getting access,
// and its volume is one record per token a client asks for (docs/decisions/0031).
func recordIssued(ctx context.Context, req *TokenRequest, grantType string, tokens []store.Token) {
	if len(tokens) == 0 {
		return
	}
	t := tokens[0]
	details := map[string]string{"grant_type": grantType, "family_id": t.FamilyID, "scope": strings.Join(t.Scopes, " ")}
	if len(t.Audience) > 0 {
		details["audience"] = strings.Join(t.Audience, " ")
	}
	if t.Act != nil {
		details["act"] = strings.Join(t.Act.Chain(), " ")
	}
	for _, tok := range tokens {
		if tok.Kind == store.RefreshToken {
			details["refresh_token"] = "issued"
		}
	}
	subject := t.Subject
	if subject == "" {
		subject = "client:" + req.Client.ID
	}
	req.Env.Record(ctx, store.AuditRecord{
		Project: req.Project.Key, Time: req.Now, Actor: "client:" + req.Client.ID, Action: events.TokenIssued,
		Target: subject, ClientID: req.Client.ID, Outcome: store.OutcomeSuccess, Details: details,
	})
}
