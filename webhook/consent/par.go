package consent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// RequestURIPrefix starts every request_uri the pushed authorization request endpoint hands out
// (RFC 9126 §2.2).
const RequestURIPrefix = "urn:ietf:params:oauth:request_uri:"

// PushedLifetime is how long a pushed request waits for /authorize: long enough for the client
// to send the browser there, short enough that a leaked request_uri is soon worthless.
const PushedLifetime = 60 * time.Second

// continuationLifetime bounds how long a pushed request, once opened at /authorize, may still
// be finished: the person may have to sign in first.
const continuationLifetime = 10 * time.Minute

// Pushed request limits per client address (token buckets, per replica, across projects): one
// push starts one person's authorization, so PushBurst, then one more every PushEvery, serves
// everyone behind an ingress that shares one address, and slows down anyone filling the store
// with a public client's id. Only stored pushes count. Over the limit the answer is 429 with
// Retry-After.
var (
	PushBurst = 600
	PushEvery = 200 * time.Millisecond
)

// clientAuthParams are client authentication, not part of the authorization request.
var clientAuthParams = []string{"client_secret", "client_assertion", "client_assertion_type", pushedParam}

// pushedResponse is RFC 9126 §2.2's answer.
type pushedResponse struct {
	RequestURI string `json:"request_uri"`
	ExpiresIn  int64  `json:"expires_in"`
}

// par is the pushed authorization request endpoint (RFC 9126). The client authenticates as at
// the token endpoint; the request is validated exactly as /authorize validates one (the client's
// redirect URI, the Project's redirect policy, PKCE, scope, resource), so pushing is never a way
// around a rule of /authorize; what passes is stored for PushedLifetime and used once.
func (a *authorizer) par(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	resp, err := a.push(w, r, p)
	if err != nil {
		e := oauth.AsError(err)
		if e.Status >= 500 {
			a.env.Logger.Error(err, "pushed authorization request failed", "project", p.Key)
		}
		oauth.WriteError(w, e)
		return
	}
	oauth.WriteJSON(w, http.StatusCreated, resp)
}

func (a *authorizer) push(w http.ResponseWriter, r *http.Request, p *config.Project) (_ *pushedResponse, err error) {
	addr := a.env.ClientAddress(r)
	if ok, wait := a.pushes.Take(r.Context(), addr, a.env.Now()); !ok {
		secs := ratelimit.Seconds(wait)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		return nil, oauth.ErrTemporarilyUnavailable.WithStatus(http.StatusTooManyRequests).
			WithDescription("too many pushed authorization requests from this address; try again in " + strconv.Itoa(secs) + " s")
	}
	defer func(ctx context.Context) {
		if err != nil {
			a.pushes.Refund(ctx, addr, a.env.Now())
		}
	}(r.Context())
	form, err := oauth.ReadForm(w, r)
	if err != nil {
		return nil, err
	}
	client, err := oauth.Authenticate(r.Context(), a.env, a.store, p, r, form)
	if err != nil {
		return nil, err
	}
	if form.Has("request_uri") {
		return nil, oauth.ErrInvalidRequest.WithDescription("request_uri cannot be pushed (RFC 9126 §2.1)")
	}
	if id := form.Get("client_id"); id != "" && id != client.ID {
		return nil, oauth.ErrInvalidRequest.WithDescription("client_id is not the authenticated client")
	}
	params := url.Values{}
	for k, v := range form {
		params[k] = v
	}
	for _, k := range clientAuthParams {
		params.Del(k)
	}
	params.Set("client_id", client.ID)
	now := a.env.Now()
	jkt, err := oauth.PushedProof(r.Context(), a.env, a.store, w, r, p, client, now)
	if err != nil {
		return nil, err
	}
	req, perr, err := parse(r.Context(), a.env, a.store, p, params, true)
	if perr != nil {
		if perr.Refused != nil {
			a.env.Record(r.Context(), store.AuditRecord{
				Project: p.Key, Actor: "client:" + client.ID, Action: events.ConsentRefusedByPolicy, Target: client.ID,
				Details: map[string]string{"redirect_uri": perr.To, "endpoint": "par"},
			})
			return nil, oauth.ErrInvalidRequest.WithDescription(perr.Message)
		}
		return nil, oauth.ErrInvalidRequest.WithDescription(perr.Message)
	}
	if err != nil {
		return nil, err
	}
	// A DPoP proof binds the code to its key, as dpop_jkt does; a request that names one key
	// in dpop_jkt and proves another contradicts itself (RFC 9449 §10.1).
	if jkt != "" {
		if req.DPoPJKT != "" && req.DPoPJKT != jkt {
			return nil, oauth.ErrInvalidRequest.WithDescription("dpop_jkt is not the thumbprint of the key that signed the DPoP proof")
		}
		req.DPoPJKT = jkt
	}
	// Store what /authorize will read: the request as validated, nothing the client added
	// beside it. dpop_jkt is among its parameters, so the code it leads to is bound.
	stored := req.query()
	stored.Del(pushedParam)
	handle := secret.New("")
	if err := a.store.CreatePushedRequest(r.Context(), store.PushedRequest{
		Hash: secret.Hash(handle), Project: p.Key, ClientID: client.ID, Params: stored.Encode(),
		ExpiresAt: now.Add(PushedLifetime), CreatedAt: now,
	}); err != nil {
		return nil, oauth.Internal(err)
	}
	return &pushedResponse{RequestURI: RequestURIPrefix + handle, ExpiresIn: int64(PushedLifetime / time.Second)}, nil
}

var errPushedClient = errors.New("pushed by another client")

// pushedRequest reads /authorize?client_id=…&request_uri=… (RFC 9126 §4): the pushed request,
// spent now, for that client only; every other parameter is ignored. A request_uri that is
// unknown, expired, already used or another client's gets a page, never a redirect (nothing
// about where to send the person is known).
func pushedRequest(ctx context.Context, env *site.Env, st Store, p *config.Project, q url.Values) (url.Values, *pageError) {
	gone := &pageError{Status: http.StatusBadRequest, Heading: "This request has expired",
		Message: "The app's request to connect has expired or has already been used. Go back to the app and start again."}
	clientID := q.Get("client_id")
	handle, ok := strings.CutPrefix(q.Get("request_uri"), RequestURIPrefix)
	if clientID == "" || !ok || handle == "" || len(q["request_uri"]) > 1 {
		return nil, gone
	}
	pr, err := st.ConsumePushedRequest(ctx, secret.Hash(handle), env.Now(), func(pr store.PushedRequest) error {
		if pr.Project != p.Key || pr.ClientID != clientID {
			return errPushedClient
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, errPushedClient) {
			env.Logger.Error(err, "cannot read a pushed authorization request", "project", p.Key)
			return nil, &pageError{Status: http.StatusInternalServerError, Heading: "Something went wrong", Message: "Please go back to the app and try again."}
		}
		return nil, gone
	}
	params, err := url.ParseQuery(pr.Params)
	if err != nil {
		return nil, gone
	}
	return params, nil
}

// pushedParam carries, across sign-in and the consent form, the proof that a request came
// through the pushed authorization request endpoint: a seal over the request's parameters and
// an expiry, made with the keyring every replica shares. A client that must push cannot forge
// one, and changing any parameter voids it.
const pushedParam = "pushed"

func sealPurpose(p *config.Project) string { return "consent.pushed:" + p.Key }

// sealPushed seals params until exp; the flow keeps the first expiry, so reloading cannot
// stretch it.
func sealPushed(env *site.Env, p *config.Project, params url.Values, exp time.Time) string {
	sum := sha256.Sum256([]byte(params.Encode()))
	var b [40]byte
	copy(b[:32], sum[:])
	binary.BigEndian.PutUint64(b[32:], uint64(exp.Unix())) //nolint:gosec // G115: times after 1970
	kid, sealed := env.Keyring.Seal(sealPurpose(p), b[:])
	return base64.RawURLEncoding.EncodeToString([]byte(kid)) + "." + base64.RawURLEncoding.EncodeToString(sealed)
}

// pushedSealValid reports whether seal covers params and has not expired, and until when.
func pushedSealValid(env *site.Env, p *config.Project, params url.Values, seal string, now time.Time) (time.Time, bool) {
	k, s, ok := strings.Cut(seal, ".")
	if !ok || len(seal) > 512 {
		return time.Time{}, false
	}
	kid, err1 := base64.RawURLEncoding.DecodeString(k)
	sealed, err2 := base64.RawURLEncoding.DecodeString(s)
	if err1 != nil || err2 != nil {
		return time.Time{}, false
	}
	b, err := env.Keyring.Open(sealPurpose(p), string(kid), sealed)
	if err != nil || len(b) != 40 {
		return time.Time{}, false
	}
	sum := sha256.Sum256([]byte(params.Encode()))
	exp := time.Unix(int64(binary.BigEndian.Uint64(b[32:])), 0) //nolint:gosec // G115: made by sealPushed
	if !bytes.Equal(b[:32], sum[:]) || !now.Before(exp) {
		return time.Time{}, false
	}
	return exp, true
}
