package oauth

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

var errAuthFailed = ErrInvalidClient.WithDescription("client authentication failed")

// authReason says why a client's authentication (or its DPoP proof) failed, for the audit
// record only: every failed authentication looks the same to the client (errAuthFailed), so
// that nobody learns which client ids exist or which part of a credential was wrong.
type authReason string

func (r authReason) Error() string { return "client authentication failed: " + string(r) }

// failed is errAuthFailed carrying why, for recordAuthFailure.
func failed(reason string) Error {
	e := errAuthFailed
	e.cause = authReason(reason)
	return e
}

// because is e carrying why, for recordAuthFailure.
func (e Error) because(reason string) Error {
	e.cause = authReason(reason)
	return e
}

// maxClaimedID bounds the client id a failed authentication's record repeats: the id is
// whatever the caller sent.
const maxClaimedID = 256

// recordAuthFailure writes client.authentication_failed for a request whose client could not
// be authenticated (invalid_client): the client id it claimed, the method it tried and why it
// failed. Malformed requests (invalid_request) are not recorded; their answer says what is
// wrong. The record is queued like the token endpoint's others (events.WrittenBehind): someone
// guessing secrets must not turn each guess into a write the answer waits for.
func recordAuthFailure(ctx context.Context, env *site.Env, p *config.Project, r *http.Request, form url.Values, err error) {
	if AsError(err).Code != ErrInvalidClient.Code {
		return
	}
	reason := "malformed_credentials"
	method, claimed := string(site.AuthNone), form.Get("client_id")
	switch {
	case form.Get("client_assertion") != "" || form.Get("client_assertion_type") != "":
		method, reason = "client_assertion", "assertion_refused"
		if id, ok := assertionSubject(form.Get("client_assertion")); ok && claimed == "" {
			claimed = id
		}
	case strings.HasPrefix(strings.ToLower(r.Header.Get("Authorization")), "basic "):
		method = string(site.AuthClientSecretBasic)
		if id, _, ok, _ := basicAuth(r); ok {
			claimed = id
		}
	case form.Get("client_secret") != "":
		method = string(site.AuthClientSecretPost)
	}
	var why authReason
	if errors.As(err, &why) {
		reason = string(why)
	}
	if len(claimed) > maxClaimedID {
		claimed = claimed[:maxClaimedID]
	}
	env.Record(ctx, store.AuditRecord{
		Project: p.Key, Actor: "client:" + claimed, Action: events.ClientAuthFailed, Target: claimed,
		Outcome: store.OutcomeRefused, Reason: reason,
		Details: map[string]string{"method": method, "endpoint": r.URL.Path},
	})
}

// readClientForm reads the form of a request to the token, revocation or introspection
// endpoint and authenticates the client that sent it.
func readClientForm(env *site.Env, st ReplayStore, p *config.Project, w http.ResponseWriter, r *http.Request) (url.Values, *site.Client, error) {
	form, err := ReadForm(w, r)
	if err != nil {
		return nil, nil, err
	}
	client, err := Authenticate(r.Context(), env, st, p, r, form)
	return form, client, err
}

// Authenticate identifies the client of a request to the token, revocation, introspection or
// pushed authorization request endpoint. It accepts exactly one method per request:
// client_secret_basic (RFC 6749 §2.3.1, with the id and secret form-url-encoded inside the
// header), client_secret_post, a JWT client assertion (private_key_jwt or client_secret_jwt,
// RFC 7523 §2.2), or none for public clients, which then prove themselves with PKCE. A client
// with a secret may use either secret method; a client of a JWT method only that method.
// Unknown clients and wrong credentials get the same answer.
//
// Client secrets are 256-bit random values stored as SHA-256, so a single hash and a
// constant-time compare are the whole cost of authentication.
func Authenticate(ctx context.Context, env *site.Env, st ReplayStore, p *config.Project, r *http.Request, form url.Values) (c *site.Client, err error) {
	defer func() {
		if err != nil {
			recordAuthFailure(ctx, env, p, r, form, err)
		}
	}()
	return authenticate(ctx, env, st, p, r, form)
}

func authenticate(ctx context.Context, env *site.Env, st ReplayStore, p *config.Project, r *http.Request, form url.Values) (*site.Client, error) {
	if form.Get("client_assertion") != "" || form.Get("client_assertion_type") != "" {
		return authenticateAssertion(ctx, env, st, p, r, form)
	}
	id, sec, basic, err := basicAuth(r)
	if err != nil {
		return nil, err
	}
	method := site.AuthNone
	switch {
	case basic:
		if form.Get("client_secret") != "" {
			return nil, ErrInvalidRequest.WithDescription("use one client authentication method per request")
		}
		if fid := form.Get("client_id"); fid != "" && fid != id {
			return nil, ErrInvalidRequest.WithDescription("client_id does not match the Authorization header")
		}
		method = site.AuthClientSecretBasic
	case form.Get("client_secret") != "":
		id, sec = form.Get("client_id"), form.Get("client_secret")
		method = site.AuthClientSecretPost
	default:
		id = form.Get("client_id")
	}
	if id == "" {
		return nil, ErrInvalidClient.WithDescription("client_id is required")
	}
	c, err := env.Client(ctx, p, id)
	if errors.Is(err, site.ErrUnknownClient) {
		return nil, failed("unknown_client")
	}
	if err != nil {
		return nil, Internal(err)
	}
	if method == site.AuthNone {
		if !c.Public() {
			return nil, failed("credentials_required")
		}
		return c, nil
	}
	// A client that chose a JWT method never sends its secret (client_secret_jwt) or has none
	// (private_key_jwt, workload_identity): the secret methods are not for it
	// (docs/decisions/0038, 0078).
	if c.AuthMethod == site.AuthClientSecretJWT || c.AuthMethod == site.AuthPrivateKeyJWT ||
		c.AuthMethod == site.AuthWorkloadIdentity || c.Public() {
		return nil, failed("method_not_allowed")
	}
	if !secret.HashEqual(sec, c.SecretHash) {
		return nil, failed("wrong_secret")
	}
	return c, nil
}

// basicAuth reads an HTTP Basic Authorization header. Other schemes are ignored here.
func basicAuth(r *http.Request) (id, sec string, ok bool, err error) {
	h := r.Header.Get("Authorization")
	if len(h) < 6 || !strings.EqualFold(h[:6], "basic ") {
		return "", "", false, nil
	}
	raw, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(h[6:]))
	if derr != nil {
		return "", "", false, ErrInvalidClient.WithDescription("malformed Basic credentials")
	}
	uid, usec, found := strings.Cut(string(raw), ":")
	if !found {
		return "", "", false, ErrInvalidClient.WithDescription("malformed Basic credentials")
	}
	// RFC 6749 §2.3.1: both parts are form-url-encoded before they are joined.
	id, err1 := url.QueryUnescape(uid)
	sec, err2 := url.QueryUnescape(usec)
	if err1 != nil || err2 != nil {
		return "", "", false, ErrInvalidClient.WithDescription("malformed Basic credentials")
	}
	return id, sec, true, nil
}
