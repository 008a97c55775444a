// Package callback connects a person's account at an upstream service (GitHub, or any OAuth 2.0
// / OIDC provider) to their Latchkey account, bound to the browser that started it (docs/connectors-for-admins.md).
//
// Begin leaves three things behind: a state row (state and PKCE verifier, the person, the
// connector, ten minutes), a one-time binding cookie in the starting browser, and only the
// cookie's hash in the row. The service sends the browser back to the connector's own fixed
// callback, {issuer}/connectors/{namespace}/{name}/callback, which answers only states started
// for that connector: a service is registered with one connector's callback and can never hand
// its code (and the PKCE verifier that goes with it) to another connector's token endpoint
// (RFC 9700 §4.4). Where the service sends iss (RFC 9207), it must be the connector's issuer.
// Nothing is saved there unless the browser is signed in to the project as the person the
// attempt was started for, checked as the row is consumed (docs/decisions/0017):
//
//   - signed in as another person: refused on the page and on its POST, the attempt ends, and
//     a connection.wrong_person security event names both people. That browser holds someone
//     else's authorization URL, or someone else signed in where the person started;
//   - signed in as nobody: nothing is exchanged; the page names the receiving account, masked,
//     and offers the project's sign-in, which comes back to the callback;
//   - signed in as that person, the cookie decides. It matches: the code is exchanged at once
//     and the connection saved. It is missing or different (an app that opened the system
//     browser): the browser gets a confirmation page naming the receiving account, masked,
//     with a one-time token, if its sign-in is recent (as connecting asks everywhere), and a
//     sign-in otherwise. Only a POST of that page's current token finishes the connection.
//
// Signing out ends the person's pending attempts and clears the binding cookie (EndOnSignOut).
package callback

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// Pattern is the route of every connector's callback under the issuer; a connector's
// CallbackURL is the issuer followed by config.CallbackPath of its namespace and name.
const Pattern = "/connectors/{connectorNamespace}/{connector}/callback"

// LegacyPath is the callback every connector of a Project used to share. It no longer finishes
// anything: a shared callback is what let one connector receive another service's code. It
// answers with a page telling the person to start again (docs/decisions/0021).
const LegacyPath = "/connectors/callback"

// ConnectorPath is the path of c's callback on this server.
func ConnectorPath(p *config.Project, c *config.Connector) string {
	// From the key, which is what the route is matched against (pathConnector).
	ns, name, _ := strings.Cut(c.Key, "/")
	return site.IssuerPath(p) + config.CallbackPath(ns, name)
}

// pathConnector is the key of the connector whose callback r arrived at.
func pathConnector(r *http.Request) string {
	return r.PathValue("connectorNamespace") + "/" + r.PathValue("connector")
}

// Purposes a connection is started for.
const (
	PurposeConnect   = "connect"
	PurposeReconnect = "reconnect"
)

// cookieBase names the binding cookie. Over http the cookie is scoped to the connector's callback
// path, so there is one per connector; over https one per host (see CookieName). Either way it
// holds one value per authorization of a connector: starting a second connection in the same
// browser replaces the first one's cookie, and the first then finishes through the confirmation
// page (decision 0010).
const cookieBase = "latchkey_connect"

// CookieName is the binding cookie's name. Over https it carries the __Host- prefix. A
// __Secure- cookie may be set with Domain= by any site of the same registrable domain (a
// sibling subdomain), and a binding value planted that way would let an attacker's own
// authorization finish in the victim's browser at once, without the confirmation page; the
// __Host- prefix forbids Domain=, so only this host can set it. Its price is Path=/.
func CookieName(env *site.Env) string {
	if env.Secure() {
		return "__Host-" + cookieBase
	}
	return cookieBase
}

// CookiePath scopes the binding cookie to the connector's callback over http, so no other page
// of the server receives it. Over https the __Host- prefix demands Path=/ (cookiePath); the
// cookie is HttpOnly and finishes nothing without its own state, so other pages that receive
// it learn nothing from it.
func CookiePath(p *config.Project, c *config.Connector) string { return ConnectorPath(p, c) }

func cookiePath(env *site.Env, p *config.Project, c *config.Connector) string {
	if env.Secure() {
		return "/"
	}
	return CookiePath(p, c)
}

// Begin starts connecting the person subject to connector c and returns the service's
// authorization URL to send the browser to. It stores the state row, sets the binding cookie on
// w (so w must not have been written to yet), and records the start in the audit log. purpose
// is PurposeConnect or PurposeReconnect (or a caller's own word); linkID names the connect link
// that started it, if any, and is handed to the hooks when the connection is saved.
//
// The redirect URI sent to the service is always c.CallbackURL; nothing in the request can
// change it. opts ask the service for another account (AnotherAccount).
func Begin(w http.ResponseWriter, r *http.Request, env *site.Env, st BeginStore, p *config.Project, c *config.Connector, subject, purpose, linkID string, opts ...BeginOption) (authURL string, err error) {
	if c == nil || subject == "" {
		return "", errors.New("callback: Begin needs a connector and a person")
	}
	if c.APIKey != nil {
		// Its key is pasted on Latchkey's own page (webhook/apikey); there is no service to send
		// the browser to, and an empty authorization URL must not become a redirect.
		return "", fmt.Errorf("callback: connector %s takes an API key, not OAuth", c.Key)
	}
	// An Organisation connector's account is connected only as its shared account, through a
	// start URL, and a Personal connector's never is (docs/shared-connections.md).
	if c.Shared != store.IsSharedSubject(subject) || (c.Shared && subject != store.SharedSubject(c.Key)) {
		return "", fmt.Errorf("callback: connector %s is not connected by %s", c.Key, subject)
	}
	now := env.Now()
	state := secret.New("")
	verifier := upstream.NewVerifier()
	authURL = upstream.AuthURL(c, state, verifier)
	var o beginOptions
	for _, opt := range opts {
		opt(&o)
	}
	authURL = upstream.AnotherAccount(authURL, c, o.selectAccount, o.hint)
	if authURL == "" {
		return "", fmt.Errorf("callback: connector %s has no usable authorization URL", c.Key)
	}
	binding := secret.New("")
	stateHash := secret.Hash(state)
	keyID, sealed := env.Keyring.Seal(verifierPurpose(p.Key, stateHash), []byte(verifier))
	lifetime := p.Lifetimes.CallbackState
	if lifetime <= 0 {
		lifetime = config.DefaultLifetimes().CallbackState
	}
	err = st.CreateCallbackState(r.Context(), store.CallbackState{
		StateHash:   stateHash,
		Project:     p.Key,
		Subject:     subject,
		Connector:   c.Key,
		Purpose:     purpose,
		LinkID:      linkID,
		Verifier:    sealed,
		KeyID:       keyID,
		BindingHash: secret.Hash(binding),
		ExpiresAt:   now.Add(lifetime),
		CreatedAt:   now,
	})
	if err != nil {
		return "", fmt.Errorf("callback: storing the state: %w", err)
	}
	setBinding(w, env, p, c, binding, lifetime)
	details := map[string]string{"connector": c.Key, "purpose": purpose, "state": stateDigest(stateHash)}
	if linkID != "" {
		details["link_id"] = linkID
	}
	env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Time: now, Actor: subject, Action: events.ConnectionStarted,
		Target: "connector:" + c.Key, Details: details,
	})
	return authURL, nil
}

// verifierPurpose binds the sealed PKCE verifier to its own row.
func verifierPurpose(project string, stateHash []byte) string {
	return "latchkey/callback-verifier\x00" + project + "\x00" + hex.EncodeToString(stateHash)
}

// stateDigest names a state row in audit records without giving away anything that finds it.
func stateDigest(stateHash []byte) string {
	sum := sha256.Sum256(stateHash)
	return hex.EncodeToString(sum[:6])
}

// setBinding sets the one-time binding cookie: HttpOnly, SameSite=Lax (so it rides the
// top-level navigation back from the service, and no cross-site POST), Secure and __Host- over
// https, scoped to the connector's callback path over http, and gone when the state expires.
func setBinding(w http.ResponseWriter, env *site.Env, p *config.Project, c *config.Connector, value string, lifetime time.Duration) {
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName(env),
		Value:    value,
		Path:     cookiePath(env, p, c),
		MaxAge:   int(lifetime / time.Second),
		HttpOnly: true,
		Secure:   env.Secure(),
		SameSite: http.SameSiteLaxMode,
	})
}

func clearBinding(w http.ResponseWriter, env *site.Env, p *config.Project, c *config.Connector) {
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName(env),
		Path:     cookiePath(env, p, c),
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   env.Secure(),
		SameSite: http.SameSiteLaxMode,
	})
}

// clearBindings expires the binding cookie wherever the browser may hold one for p: over https
// the one __Host- cookie at /, over http one per connector's callback path.
func clearBindings(w http.ResponseWriter, env *site.Env, p *config.Project) {
	if env.Secure() {
		clearBinding(w, env, p, nil)
		return
	}
	for _, c := range p.Connectors {
		clearBinding(w, env, p, c)
	}
}

// readBinding returns the binding cookie's value, or "".
func readBinding(r *http.Request, env *site.Env) string {
	c, err := r.Cookie(CookieName(env))
	if err != nil || len(c.Value) > 128 {
		return ""
	}
	return c.Value
}

// EndOnSignOut is the sign-out hook (signin.Register) that ends every connection attempt the
// person has pending in the project and clears the browser's binding cookie: an attempt belongs
// to the sign-in it was started under, and must not finish for whoever signs in next in the
// same browser. The callback refuses that anyway (the browser must be signed in as the person
// who started); ending the attempt means nobody, not even the same person signing in again,
// finishes a connection started before they signed out.
func EndOnSignOut(env *site.Env, st SignOutStore) signin.SignOutHook {
	return func(ctx context.Context, w http.ResponseWriter, p *config.Project, subject string) error {
		clearBindings(w, env, p)
		if subject == "" {
			return nil
		}
		n, err := st.EndCallbackStates(ctx, p.Key, subject)
		if err != nil {
			return fmt.Errorf("callback: ending attempts on sign-out: %w", err)
		}
		if n > 0 {
			env.Record(ctx, store.AuditRecord{
				Project: p.Key, Time: env.Now(), Actor: subject, Action: ActionEndedBySignOut,
				Target: "person:" + subject, Details: map[string]string{"attempts": strconv.FormatInt(n, 10)},
			})
		}
		return nil
	}
}

// BeginOption changes what Begin asks the service for.
type BeginOption func(*beginOptions)

type beginOptions struct {
	selectAccount bool
	hint          string
}

// AnotherAccount asks the service to let the person pick another account than the one signed
// in there, where the Connector's service can be asked (config.Connector.SelectAccountParams),
// and suggests hint, the account's name, where it takes a suggestion ("" suggests none). The
// person connecting a further account needs it: without it most services hand back the
// account already signed in (docs/several-accounts.md). Which account arrives is still the
// person's choice at the service.
func AnotherAccount(selectAccount bool, hint string) BeginOption {
	return func(o *beginOptions) { o.selectAccount, o.hint = selectAccount, hint }
}
