package consent

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

const (
	maxStateLen = 2048
	maxNonceLen = 512
)

// request is a validated authorization request.
type request struct {
	Client *site.Client
	// RedirectURI is redirect_uri as sent ("" when omitted); To is where responses go.
	RedirectURI string
	To          string
	State       string
	Scopes      []string
	Challenge   string
	Resources   []string
	// Details are the RFC 9396 authorization_details, validated against the Project's types
	// and in canonical form (so the consent form and a pushed request's seal carry them
	// exactly as they will be stored).
	Details []authzdetails.Detail
	Nonce   string
	// DPoPJKT binds the code to a DPoP key (RFC 9449 §10): dpop_jkt as sent, or the key of the
	// DPoP proof a pushed request came with.
	DPoPJKT string
	Prompt  []string
	// MaxAge is max_age in seconds, -1 when absent.
	MaxAge int64
	// LoginAfter is when this server sent the browser to sign in for prompt=login (or
	// max_age=0): a sign-in at or after it satisfies the request. It comes back sealed with
	// the request (loginAfterParam); 0 when absent or not a seal this server made for this
	// request in the last continuationLifetime.
	LoginAfter int64
	// Pushed: the request came through the pushed authorization request endpoint (RFC 9126),
	// now or, sealed, earlier in this flow. Seal carries that across sign-in and the consent
	// form, until SealExpires.
	Pushed      bool
	Seal        string
	SealExpires time.Time
}

func (q *request) has(prompt string) bool { return slices.Contains(q.Prompt, prompt) }

// pageError is shown as an HTML page, never as a redirect: the redirect address is not
// verified (or the client is refused outright).
type pageError struct {
	Status  int
	Heading string
	Message string
	// Args fill in Message, a catalog message (webhook/pages), when it has verbs.
	Args []any
	// Refused, when set, is the redirect policy's refusal of Client, whose request would have
	// sent access to To: it is recorded as a security event before the page is shown.
	Refused error
	Client  *site.Client
	To      string
}

// parse validates an authorization request. Errors about the client or its redirect address
// come back as pageError; every other error is an oauth.Error for the redirect.
//
// viaPAR says q was pushed to the pushed authorization request endpoint by its authenticated
// client. At /authorize, request_uri and client_id stand for the pushed request (spent here).
//
//nolint:gocyclo,funlen // one branch per parameter check, in the order RFC 6749 §4.1.2.1 sets (redirect_uri before anything is redirected), read against the RFC as one list
func parse(ctx context.Context, env *site.Env, st Store, p *config.Project, q url.Values, viaPAR bool) (*request, *pageError, error) {
	fromURI := false
	if q.Has("request_uri") && !viaPAR {
		expanded, perr := pushedRequest(ctx, env, st, p, q)
		if perr != nil {
			return nil, perr, nil
		}
		q, fromURI = expanded, true
	}
	for _, k := range []string{"client_id", "redirect_uri"} {
		if len(q[k]) > 1 {
			return nil, &pageError{Status: http.StatusBadRequest, Heading: "This request is not valid", Message: "The request names more than one %s.", Args: []any{k}}, nil
		}
	}
	client, err := env.Client(ctx, p, q.Get("client_id"))
	if errors.Is(err, site.ErrUnknownClient) {
		var doc *clientdoc.Error
		if errors.As(err, &doc) {
			return nil, &pageError{Status: http.StatusBadRequest, Heading: "This app cannot be used",
				Message: "The app identifies itself by a description published at %s, which cannot be used: %s. Nothing was allowed. The app's developer can fix this.",
				Args:    []any{q.Get("client_id"), doc.Reason}}, nil
		}
		return nil, &pageError{Status: http.StatusBadRequest, Heading: "Unknown app",
			Message: "The app that sent you here is not known to this project, so there is nothing to allow. If you followed a link, it may be wrong or out of date."}, nil
	}
	if err != nil {
		return nil, nil, oauth.Internal(err)
	}
	req := &request{Client: client, RedirectURI: q.Get("redirect_uri"), MaxAge: -1}
	switch {
	case req.RedirectURI != "" && MatchRedirect(client.RedirectURIs, req.RedirectURI):
		req.To = req.RedirectURI
	case req.RedirectURI == "" && len(client.RedirectURIs) == 1:
		req.To = client.RedirectURIs[0]
	default:
		return nil, &pageError{Status: http.StatusBadRequest, Heading: "Unregistered address",
			Message: "The app asked to send you back to an address it has not registered. Nothing was sent there. If you did not expect this, close this page."}, nil
	}
	// Every registered redirect counts, not only this one: a token does not remember which
	// redirect its code went to.
	if err := env.RedirectPolicy(p, client.RedirectURIs); err != nil {
		return nil, &pageError{Status: http.StatusForbidden, Heading: "This app cannot connect", Message: err.Error(),
			Refused: err, Client: client, To: req.To}, nil
	}
	// From here on errors go back to the verified redirect URI, with state and iss.
	req.State = q.Get("state")
	if len(req.State) > maxStateLen {
		req.State = ""
		return req, nil, oauth.ErrInvalidRequest.WithDescription("state is too long")
	}
	if err := oauth.CheckRepeats(q); err != nil {
		return req, nil, err
	}
	if q.Get("request") != "" {
		return req, nil, oauth.Error{Code: "request_not_supported", Description: "request objects are not supported"}
	}
	switch rt := q.Get("response_type"); {
	case rt == "":
		return req, nil, oauth.ErrInvalidRequest.WithDescription("response_type is required")
	case rt != "code":
		return req, nil, oauth.Error{Code: "unsupported_response_type", Description: "only response_type=code is supported"}
	}
	if rm := q.Get("response_mode"); rm != "" && rm != "query" {
		return req, nil, oauth.ErrInvalidRequest.WithDescription("only response_mode=query is supported")
	}
	if !client.HasGrant(site.GrantAuthorizationCode) {
		return req, nil, oauth.ErrUnauthorizedClient.WithDescription("the client may not use the authorization code flow")
	}
	req.Challenge = q.Get("code_challenge")
	switch m := q.Get("code_challenge_method"); {
	case req.Challenge == "":
		return req, nil, oauth.ErrInvalidRequest.WithDescription("code_challenge is required (PKCE with S256)")
	case m != "S256":
		return req, nil, oauth.ErrInvalidRequest.WithDescription("code_challenge_method must be S256")
	case !oauth.ValidChallenge(req.Challenge):
		return req, nil, oauth.ErrInvalidRequest.WithDescription("code_challenge is malformed")
	}
	if req.Scopes, err = oauth.ParseScope(q.Get("scope")); err != nil {
		return req, nil, err
	}
	if !client.AllowsScopes(req.Scopes) {
		return req, nil, oauth.ErrInvalidScope.WithDescription("the client may not ask for this scope")
	}
	if req.Resources, err = oauth.ParseResources(q["resource"]); err != nil {
		return req, nil, err
	}
	if req.Details, err = parseDetails(p, q.Get("authorization_details")); err != nil {
		return req, nil, err
	}
	if req.Nonce = q.Get("nonce"); len(req.Nonce) > maxNonceLen {
		return req, nil, oauth.ErrInvalidRequest.WithDescription("nonce is too long")
	}
	if req.DPoPJKT = q.Get("dpop_jkt"); q.Has("dpop_jkt") && !oauth.ValidJKT(req.DPoPJKT) {
		req.DPoPJKT = ""
		return req, nil, oauth.ErrInvalidRequest.WithDescription("dpop_jkt must be the JWK SHA-256 thumbprint of the DPoP key (RFC 9449 §10): 43 base64url characters")
	}
	for v := range strings.FieldsSeq(q.Get("prompt")) {
		switch v {
		case "none", "login", "consent", "select_account":
			req.Prompt = append(req.Prompt, v)
		default:
			return req, nil, oauth.ErrInvalidRequest.WithDescription("unknown prompt value")
		}
	}
	if req.has("none") && len(req.Prompt) > 1 {
		return req, nil, oauth.ErrInvalidRequest.WithDescription("prompt=none cannot be combined with other values")
	}
	if s := q.Get("max_age"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return req, nil, oauth.ErrInvalidRequest.WithDescription("max_age must be a non-negative integer")
		}
		req.MaxAge = n
	}
	now := env.Now()
	if s := q.Get(loginAfterParam); s != "" {
		req.LoginAfter = openLoginAfter(env, p, req.values(), s, now)
	}
	switch {
	case viaPAR:
		req.Pushed = true
	case fromURI:
		req.Pushed, req.SealExpires = true, now.Add(continuationLifetime)
	case q.Get(pushedParam) != "":
		req.SealExpires, req.Pushed = pushedSealValid(env, p, req.values(), q.Get(pushedParam), now)
	}
	if req.Pushed && !viaPAR {
		req.Seal = sealPushed(env, p, req.values(), req.SealExpires)
	}
	// RFC 9126 §6: a client or Project that requires pushed requests gets no code for a request
	// that was not pushed, whatever else it carries.
	if !req.Pushed && (p.RequirePAR || client.RequirePAR) {
		return req, nil, oauth.ErrInvalidRequest.WithDescription("this client must push its authorization requests to the pushed authorization request endpoint (RFC 9126) and send only client_id and request_uri here")
	}
	return req, nil, nil
}

// values are the request's parameters that decide what is granted and where it goes, as the
// seal of a pushed request covers them.
func (q *request) values() url.Values {
	v := url.Values{}
	for _, f := range q.fields() {
		v.Add(f.Name, f.Value)
	}
	return v
}

// echo is the request as hidden form fields for the consent page; the decision POST is
// validated again from them, and tampering with them changes nothing that parse would not
// refuse on a fresh request.
func (q *request) echo() []pages.Field {
	f := q.fields()
	if q.Seal != "" {
		f = append(f, pages.Field{Name: pushedParam, Value: q.Seal})
	}
	return f
}

func (q *request) fields() []pages.Field {
	f := []pages.Field{
		{Name: "client_id", Value: q.Client.ID},
		{Name: "response_type", Value: "code"},
		{Name: "code_challenge", Value: q.Challenge},
		{Name: "code_challenge_method", Value: "S256"},
	}
	add := func(k, v string) {
		if v != "" {
			f = append(f, pages.Field{Name: k, Value: v})
		}
	}
	add("redirect_uri", q.RedirectURI)
	add("state", q.State)
	add("scope", strings.Join(q.Scopes, " "))
	add("nonce", q.Nonce)
	add("dpop_jkt", q.DPoPJKT)
	add("authorization_details", authzdetails.Marshal(q.Details))
	for _, r := range q.Resources {
		f = append(f, pages.Field{Name: "resource", Value: r})
	}
	return f
}

// query is the request as an /authorize query string (to come back after signing in).
func (q *request) query() url.Values {
	v := url.Values{}
	for _, f := range q.echo() {
		v.Add(f.Name, f.Value)
	}
	if len(q.Prompt) > 0 {
		v.Set("prompt", strings.Join(q.Prompt, " "))
	}
	if q.MaxAge >= 0 {
		v.Set("max_age", strconv.FormatInt(q.MaxAge, 10))
	}
	return v
}
