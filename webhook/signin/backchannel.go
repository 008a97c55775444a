package signin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// OpenID Connect Back-Channel Logout 1.0, the relying party's side: the project's OpenID
// provider POSTs a logout token to {issuer}/sign-in/backchannel-logout when a person's
// sessions end there (sign-out, an administrator ending them, the person disabled). Latchkey
// then ends the person's sessions and every token issued for them (docs/leavers.md, decision
// 0032).
const (
	// BackchannelLogoutPath is the endpoint under the issuer; give {issuer} + this path to the
	// provider as the client's backchannel_logout_uri.
	BackchannelLogoutPath = "/sign-in/backchannel-logout"

	logoutEvent = "http://schemas.openid.net/event/backchannel-logout"
	// logoutMaxAge is how old a logout token's iat may be (§2.6 step 7 leaves the window to
	// the relying party); its jti is remembered at least this long, so a replay is refused
	// for as long as the token would otherwise be accepted.
	logoutMaxAge = 5 * time.Minute
	// maxJTI and maxSID bound identifiers before they are stored or compared.
	maxJTI = 256
	maxSID = 256
)

// logoutRefusal is a logout token refused for what it says; its description goes to the
// provider as is.
type logoutRefusal string

func (e logoutRefusal) Error() string { return string(e) }

func (h *handler) backchannelLogout(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	o := p.SignIn.OIDC
	if o == nil {
		oauth.WriteError(w, oauth.ErrNotFound.WithDescription("this project signs nobody in with an OpenID provider"))
		return
	}
	// The address's budget is spent before the token is looked at (its checks may fetch the
	// provider's keys) and given back once it verifies (LogoutBurst).
	addr := p.Key + "|" + h.env.ClientAddress(r)
	if ok, wait := h.logouts.Take(r.Context(), addr, h.env.Now()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(ratelimit.Seconds(wait)))
		oauth.WriteError(w, oauth.ErrTemporarilyUnavailable.WithStatus(http.StatusTooManyRequests).WithDescription("too many back-channel logout requests from this address; try again later"))
		return
	}
	form, err := oauth.ReadForm(w, r)
	if err != nil {
		oauth.WriteError(w, err)
		return
	}
	raw := form.Get("logout_token")
	if raw == "" {
		oauth.WriteError(w, oauth.ErrInvalidRequest.WithDescription("logout_token is required"))
		return
	}
	now := h.env.Now()
	// A missing client secret does not stop this: the token is checked with the provider's
	// published keys, and a leaver must still be signed out.
	prov, err := h.providers.get(o.Issuer, now) //nolint:contextcheck // discovery is cached for every request, not tied to this one
	if err != nil {
		h.env.Logger.Error(err, "cannot discover the sign-in provider for a back-channel logout", "project", p.Key, "issuer", o.Issuer)
		oauth.WriteError(w, oauth.ErrTemporarilyUnavailable.WithDescription("the provider's keys cannot be fetched right now"))
		return
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(r.Context(), h.providers.client), upstreamTimeout)
	defer cancel()
	// §2.6 steps 3-5: signature with the provider's keys and an algorithm it announces, iss,
	// aud containing our client id, exp.
	tok, err := prov.Verifier(&oidc.Config{ClientID: o.ClientID, Now: h.env.Now}).Verify(ctx, raw)
	if err != nil {
		// Unverified: whatever it says is nobody's word, so it is only logged.
		h.env.Logger.Info("back-channel logout token refused", "project", p.Key, "reason", err.Error())
		oauth.WriteError(w, oauth.ErrInvalidRequest.WithDescription("the logout token is not valid"))
		return
	}
	h.logouts.Refund(r.Context(), addr, now)
	l, err := logoutClaims(p, tok, now)
	if err != nil {
		h.refuseLogout(r.Context(), w, p, "invalid_logout_token", err)
		return
	}
	ended, err := h.store.Logout(r.Context(), l)
	if errors.Is(err, store.ErrConflict) {
		h.refuseLogout(r.Context(), w, p, "logout_token_replayed", logoutRefusal("the logout token was already used"))
		return
	}
	if err != nil {
		h.env.Logger.Error(err, "cannot end sign-ins for a back-channel logout", "project", p.Key)
		oauth.WriteError(w, oauth.Internal(err))
		return
	}
	for _, subject := range ended.Subjects {
		h.env.Record(r.Context(), store.AuditRecord{Project: p.Key, Actor: "system", Action: events.BackchannelLogout, Target: subject,
			Details: map[string]string{"issuer": o.Issuer, "by": logoutBy(l), "sessions": strconv.FormatInt(ended.Sessions, 10),
				"tokens": strconv.FormatInt(ended.Tokens, 10), "passkeys": strconv.FormatInt(ended.Passkeys, 10)}})
	}
	h.env.Logger.V(1).Info("back-channel logout", "project", p.Key, "people", len(ended.Subjects))
	// §2.8: 200 on success; nothing in the body, and nothing to cache.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// refuseLogout answers 400 to a logout token that verified but breaks a rule, and records it:
// it was signed with the provider's key, so it is either a provider fault or a replay.
func (h *handler) refuseLogout(ctx context.Context, w http.ResponseWriter, p *config.Project, code string, err error) {
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: "system", Action: events.BackchannelLogoutRefused,
		Target: p.SignIn.OIDC.Issuer, Reason: code, Details: map[string]string{"reason": err.Error()}})
	oauth.WriteError(w, oauth.ErrInvalidRequest.WithDescription(err.Error()))
}

// logoutClaims applies the rest of §2.6 to a verified token and says what it asks for.
func logoutClaims(p *config.Project, tok *oidc.IDToken, now time.Time) (store.Logout, error) {
	var c struct {
		Events map[string]json.RawMessage `json:"events"`
		SID    string                     `json:"sid"`
		JTI    string                     `json:"jti"`
		Nonce  *json.RawMessage           `json:"nonce"`
	}
	if err := tok.Claims(&c); err != nil {
		return store.Logout{}, logoutRefusal("the logout token's claims are malformed")
	}
	// Step 6: iat within our window; exp was checked by the verifier.
	if tok.IssuedAt.IsZero() || now.Sub(tok.IssuedAt) > logoutMaxAge || tok.IssuedAt.After(now.Add(authTimeSkew)) {
		return store.Logout{}, logoutRefusal("the logout token's iat is missing or outside the accepted window")
	}
	// Step 7: an events member naming back-channel logout, whose value is a JSON object.
	ev, ok := c.Events[logoutEvent]
	if !ok || len(ev) == 0 || ev[0] != '{' {
		return store.Logout{}, logoutRefusal("the logout token's events claim does not name " + logoutEvent)
	}
	// Step 8: sub, sid, or both.
	if tok.Subject == "" && c.SID == "" {
		return store.Logout{}, logoutRefusal("the logout token names neither sub nor sid")
	}
	// Step 9: never a nonce, so an ID token cannot pass as a logout token.
	if c.Nonce != nil {
		return store.Logout{}, logoutRefusal("the logout token carries a nonce")
	}
	// Step 10 (optional in the spec, required here): a jti, remembered against replay.
	if c.JTI == "" || len(c.JTI) > maxJTI || len(c.SID) > maxSID {
		return store.Logout{}, logoutRefusal("the logout token's jti is missing, or an identifier is too long")
	}
	// Past iat+logoutMaxAge the token is refused for its age whatever its exp says, so its
	// jti need not be remembered longer.
	l := store.Logout{Project: p.Key, JTI: c.JTI, Now: now, Until: tok.IssuedAt.Add(logoutMaxAge + authTimeSkew)}
	if tok.Subject != "" {
		l.SourceSubject = tok.Issuer + "|" + tok.Subject
	} else {
		l.SID = tok.Issuer + "|" + c.SID
	}
	return l, nil
}

// logoutBy says, for the audit record, what the logout token named the person by.
func logoutBy(l store.Logout) string {
	if l.SourceSubject != "" {
		return "sub"
	}
	return "sid"
}
