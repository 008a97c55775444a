package ciba

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// PrefixAuthReqID starts every auth_req_id, so a leaked one is recognisable.
const PrefixAuthReqID = "lk_ar_"

// Errors of the backchannel authentication endpoint that RFC 6749 does not define
// (CIBA Core §13; RFC 9396 §5 for authorization_details).
var (
	errUnknownUser            = oauth.Error{Code: "unknown_user_id", Status: http.StatusBadRequest}
	errInvalidBindingMessage  = oauth.Error{Code: "invalid_binding_message", Status: http.StatusBadRequest}
	errAccessDeniedByPerson   = oauth.ErrAccessDenied.WithDescription("the person does not accept requests from this client")
	errUnsupportedHint        = oauth.ErrInvalidRequest.WithDescription("only login_hint (the person's e-mail address or subject) is supported; id_token_hint and login_hint_token are not")
	errUserCodeNotSupported   = oauth.ErrInvalidRequest.WithDescription("user_code is not supported (backchannel_user_code_parameter_supported is false)")
	errOnlyDeclaredClients    = oauth.ErrUnauthorizedClient.WithDescription("only confidential clients declared as OAuthClient resources with the ciba grant type may ask for approvals")
	errNotificationTokenLimit = oauth.ErrInvalidRequest.WithDescription("client_notification_token must be 1 to 1024 printable ASCII characters")
)

// response is the successful answer (CIBA Core §7.3).
type response struct {
	AuthReqID string `json:"auth_req_id"`
	ExpiresIn int64  `json:"expires_in"`
	Interval  int64  `json:"interval"`
}

// authenticate is the backchannel authentication endpoint (CIBA Core §7).
func (f *flow) authenticate(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	resp, err := f.request(w, r, p)
	if err != nil {
		e := oauth.AsError(err)
		if e.Status >= 500 {
			f.env.ResponseLog(w).Error(err, "backchannel authentication failed", "project", p.Key)
		}
		oauth.WriteError(w, e)
		return
	}
	oauth.WriteJSON(w, http.StatusOK, resp)
}

func (f *flow) request(w http.ResponseWriter, r *http.Request, p *config.Project) (_ *response, err error) {
	form, err := oauth.ReadForm(w, r)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	client, err := oauth.Authenticate(ctx, f.env, f.store, p, r, form)
	if err != nil {
		return nil, err
	}
	declared := p.Clients[client.ID]
	if declared == nil || client.Registered || client.Public() || !client.HasGrant(GrantType) {
		return nil, errOnlyDeclaredClients
	}
	now := f.env.Now()
	// After client authentication: nobody else can spend a client's allowance.
	if e := f.take(ctx, p, client, now); e != nil {
		if secs, ok := e.Extra["retry_after"].(int); ok {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			delete(e.Extra, "retry_after")
		}
		return nil, *e
	}
	// Only a request that is stored (and announced) spends the allowance.
	defer func(ctx context.Context) {
		if err != nil {
			f.limit.Refund(ctx, p.Key+"|"+client.ID, f.env.Now())
		}
	}(ctx)
	a, person, notifyToken, err := f.parse(ctx, p, client, declared, form, now)
	if err != nil {
		return nil, err
	}
	return f.start(ctx, p, declared, a, notifyToken, person.ID, now)
}

// parse validates the request's parameters into a new pending request for the person the
// login_hint names; notifyToken is the ping mode's client_notification_token.

func (f *flow) parse(ctx context.Context, p *config.Project, client *site.Client, declared *config.Client, form map[string][]string, now time.Time) (a store.Approval, person store.Person, notifyToken string, err error) {
	get := func(k string) string {
		if v := form[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	scopes, err := oauth.ParseScope(get("scope"))
	if err != nil {
		return a, person, "", err
	}
	if !slices.Contains(scopes, "openid") {
		return a, person, "", oauth.ErrInvalidScope.WithDescription("scope must contain openid (CIBA Core §7.1)")
	}
	if !client.AllowsScopes(scopes) {
		return a, person, "", oauth.ErrInvalidScope.WithDescription("the client may not ask for that scope")
	}
	if get("id_token_hint") != "" || get("login_hint_token") != "" {
		return a, person, "", errUnsupportedHint
	}
	if get("user_code") != "" {
		return a, person, "", errUserCodeNotSupported
	}
	person, err = f.person(ctx, p, get("login_hint"))
	if err != nil {
		return a, person, "", err
	}
	msg := get("binding_message")
	if !validBindingMessage(msg) {
		return a, person, "", errInvalidBindingMessage.WithDescription("binding_message must be at most " + strconv.Itoa(MaxBindingMessage) + " characters of plain text on one line")
	}
	expiry, err := requestedExpiry(get("requested_expiry"))
	if err != nil {
		return a, person, "", err
	}
	details, err := Details(p, get("authorization_details"))
	if err != nil {
		return a, person, "", err
	}
	mode := modeOf(declared)
	if mode == modePing {
		notifyToken = get("client_notification_token")
		if notifyToken == "" || len(notifyToken) > 1024 || !printableASCII(notifyToken) {
			return a, person, "", errNotificationTokenLimit
		}
	}
	return store.Approval{
		Project: p.Key, ClientID: client.ID, Subject: person.ID, Scopes: scopes, BindingMessage: msg,
		AuthorizationDetails: details, DeliveryMode: mode, Status: store.ApprovalPending, Interval: Interval,
		CreatedAt: now, ExpiresAt: now.Add(expiry),
	}, person, notifyToken, nil
}

// person finds whom login_hint names: a person's subject, or the e-mail address of someone in
// the Project's password file. Only a person who has signed in before and may still sign in
// can be asked.
func (f *flow) person(ctx context.Context, p *config.Project, hint string) (store.Person, error) {
	if hint == "" {
		return store.Person{}, oauth.ErrInvalidRequest.WithDescription("login_hint is required")
	}
	person, err := f.store.GetPerson(ctx, p.Key, hint)
	if errors.Is(err, store.ErrNotFound) {
		person, err = f.store.FindPerson(ctx, p.Key, "password", hint)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Person{}, errUnknownUser.WithDescription("no person of this project matches login_hint")
	case err != nil:
		return store.Person{}, oauth.Internal(err)
	case !site.PersonActive(p, person):
		return store.Person{}, errUnknownUser.WithDescription("no person of this project matches login_hint")
	}
	return person, nil
}

// validBindingMessage: short plain text on one line. Markup is allowed as text: the page shows
// it escaped, never rendered.
func validBindingMessage(s string) bool {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > MaxBindingMessage {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf) {
			return false
		}
	}
	return true
}

func requestedExpiry(v string) (time.Duration, error) {
	if v == "" {
		return DefaultExpiry, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > int64(MaxExpiry/time.Second) || strings.HasPrefix(v, "+") {
		return 0, oauth.ErrInvalidRequest.WithDescription("requested_expiry must be a whole number of seconds from 1 to " + strconv.FormatInt(int64(MaxExpiry/time.Second), 10))
	}
	return time.Duration(n) * time.Second, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func agentName(c *config.Client) string {
	if c.Name != "" {
		return c.Name
	}
	return c.ID
}
