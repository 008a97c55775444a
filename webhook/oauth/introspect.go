package oauth

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// introspection is an RFC 7662 response.
type introspection struct {
	Active    bool     `json:"active"`
	Scope     string   `json:"scope,omitempty"`
	ClientID  string   `json:"client_id,omitempty"`
	Sub       string   `json:"sub,omitempty"`
	Aud       []string `json:"aud,omitempty"`
	Iss       string   `json:"iss,omitempty"`
	Exp       int64    `json:"exp,omitempty"`
	Iat       int64    `json:"iat,omitempty"`
	TokenType string   `json:"token_type,omitempty"`
	AuthTime  int64    `json:"auth_time,omitempty"`
	// SubjectType says whether the token acts for a person or only for its client.
	SubjectType string `json:"latchkey_subject_type,omitempty"`
	// Cnf is the key a DPoP-bound token is bound to (RFC 9449 §6.2).
	Cnf *Confirmation `json:"cnf,omitempty"`
	// Act and MayAct are the token's delegation claims (RFC 8693 §4.1, §4.4), as stored.
	Act    *store.Actor `json:"act,omitempty"`
	MayAct *store.Actor `json:"may_act,omitempty"`
}

// Who a token acts for, in the SubjectTypeClaim member of introspection answers and JWT access
// tokens (docs/decisions/0018). A token a client got for itself (client_credentials) names no
// person: it has no "sub" at all, so a resource server that reads only the standard members
// finds no person to act for, and SubjectTypeClaim says "client" for one that asks.
const (
	SubjectTypeClaim  = "latchkey_subject_type"
	SubjectTypePerson = "person"
	SubjectTypeClient = "client"
)

// subjectType is the SubjectTypeClaim value of a token issued for subject ("" for none).
func subjectType(subject string) string {
	if subject == "" {
		return SubjectTypeClient
	}
	return SubjectTypePerson
}

// introspect is RFC 7662, for authenticated (confidential) clients only: resource servers
// introspect tokens issued to other clients, so a declared confidential client (one an
// administrator authorised, RFC 7662 §4) may ask about any access token of the project. A
// client that registered itself is authorised by nobody: it learns only about tokens issued to
// it or naming it as their audience. Refresh tokens are described only to the client that
// holds them. Revoked, expired, retired, foreign and off-limits tokens are all just
// {"active":false}.
func introspect(env *site.Env, st Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := site.Project(r)
		form, client, err := readClientForm(env, st, p, w, r)
		if err != nil {
			logFail(env, w, p, "introspection", err)
			return
		}
		if client.Public() {
			WriteError(w, ErrInvalidClient.WithDescription("introspection needs an authenticated client"))
			return
		}
		tok := form.Get("token")
		if tok == "" {
			WriteError(w, ErrInvalidRequest.WithDescription("token is required"))
			return
		}
		now := env.Now()
		// The token with its person in one read: a person the project no longer lets sign in
		// (removed from the password file, or under an issuer it no longer trusts) holds no
		// active token, whether or not anything revoked it yet.
		t, person, found, err := st.TokenHolder(r.Context(), secret.Hash(tok))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			logFail(env, w, p, "introspection", Internal(err))
			return
		}
		inactive := err != nil || t.Project != p.Key || !t.Active(now) || p.ClientGone(t.ClientID) ||
			(t.Subject != "" && (!found || !site.PersonActive(p, person))) ||
			(t.Kind == store.RefreshToken && (t.ClientID != client.ID || t.RotatedAt != nil)) ||
			(client.Registered && t.ClientID != client.ID && !slices.Contains(t.Audience, client.ID))
		if !inactive {
			// A token held by a client the redirect policy refuses is dead at once, on every
			// replica, whether or not the controller has revoked it yet.
			refused, err := env.ClientRefused(r.Context(), p, t.ClientID)
			if err != nil {
				logFail(env, w, p, "introspection", Internal(err))
				return
			}
			inactive = refused != nil
		}
		if inactive {
			WriteJSON(w, http.StatusOK, introspection{Active: false})
			return
		}
		// A client-only token has no sub: RFC 7662 makes it optional, and reporting the client
		// id there would let a resource server take the client for a person.
		out := introspection{
			Active:      true,
			Scope:       strings.Join(t.Scopes, " "),
			ClientID:    t.ClientID,
			Sub:         t.Subject,
			Aud:         t.Audience,
			Iss:         p.Issuer,
			Exp:         t.ExpiresAt.Unix(),
			Iat:         t.IssuedAt.Unix(),
			SubjectType: subjectType(t.Subject),
			Act:         t.Act,
			MayAct:      t.MayAct,
		}
		if t.JKT != "" {
			out.Cnf = &Confirmation{JKT: t.JKT}
		}
		switch {
		case t.Kind == store.AccessToken && t.JKT != "":
			out.TokenType = TokenTypeDPoP
		case t.Kind == store.AccessToken:
			out.TokenType = "Bearer"
		default:
			out.TokenType = "refresh_token"
		}
		if t.Subject != "" && !t.AuthTime.IsZero() {
			out.AuthTime = t.AuthTime.Unix()
		}
		WriteJSON(w, http.StatusOK, out)
	}
}
