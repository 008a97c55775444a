package oauth

import (
	"errors"
	"net/http"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// revoke is RFC 7009. A client may revoke only its own tokens; revoking a refresh token ends
// its whole family. Unknown tokens, and other clients' tokens, get the same 200 so the
// endpoint says nothing about which tokens exist.
func revoke(env *site.Env, st Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := site.Project(r)
		form, client, err := readClientForm(env, st, p, w, r)
		if err != nil {
			logFail(env, w, p, "revocation", err)
			return
		}
		tok := form.Get("token")
		if tok == "" {
			WriteError(w, ErrInvalidRequest.WithDescription("token is required"))
			return
		}
		now := env.Now()
		hash := secret.Hash(tok)
		t, err := st.GetToken(r.Context(), hash)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			logFail(env, w, p, "revocation", Internal(err))
			return
		case t.Project == p.Key && t.ClientID == client.ID && t.RevokedAt == nil:
			if err := st.RevokeToken(r.Context(), hash, now); err != nil && !errors.Is(err, store.ErrNotFound) {
				logFail(env, w, p, "revocation", Internal(err))
				return
			}
			subject := t.Subject
			if subject == "" {
				subject = "client:" + client.ID
			}
			env.Record(r.Context(), store.AuditRecord{
				Project: p.Key, Actor: "client:" + client.ID, Action: events.TokenRevoked, Target: subject, ClientID: client.ID,
				Details: map[string]string{"kind": string(t.Kind), "family_id": t.FamilyID},
			})
		}
		WriteJSON(w, http.StatusOK, struct{}{})
	}
}
