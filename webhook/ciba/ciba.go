// Package ciba is asynchronous approval: OpenID Client-Initiated Backchannel Authentication
// (CIBA Core 1.0). A declared, confidential agent asks at the backchannel authentication
// endpoint "may I do X for this person?"; the person answers on the "Waiting for you" page
// beside their account page, after a recent sign-in; the agent polls the token endpoint with
// the auth_req_id it was given (or is pinged, then polls) and gets a token for the person once
// they approved (docs/approvals.md).
//
// The auth_req_id is stored only as its hash and redeemed once. The page's forms name a request
// by a separate random id, so nothing a browser sees can be redeemed, and the store decides a
// request only for the person it names.
package ciba

import (
	"net/http"
	"time"

	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// GrantType is the CIBA grant at the token endpoint (CIBA Core §10.1).
const GrantType = site.GrantCIBA

// Paths under the issuer.
const (
	Path        = "/bc-authorize"
	PagePath    = "/account/approvals"
	DecidePath  = "/account/approvals/decide"
	BlockPath   = "/account/approvals/block"
	UnblockPath = "/account/approvals/unblock"
)

// Limits of a request.
const (
	// DefaultExpiry is how long a request waits for the person unless requested_expiry says
	// otherwise; MaxExpiry the most it may ask for.
	DefaultExpiry = 10 * time.Minute
	MaxExpiry     = 24 * time.Hour
	// Interval is the least time between two polls (CIBA Core §7.3); polling sooner raises it
	// by SlowDownStep for that request (RFC 8628 §3.5, which CIBA's slow_down follows).
	Interval     = 5 * time.Second
	SlowDownStep = 5 * time.Second
	// MaxBindingMessage is the most runes a binding message may have: it is shown on the
	// agent's screen and on the person's page, and must read at a glance.
	MaxBindingMessage = 140
	// ClientBurst requests at once, then one every ClientEvery, per client: an agent cannot
	// flood a person (or the event sinks) with requests.
	ClientBurst = 10
	ClientEvery = time.Minute
)

// Options of the flow.
type Options struct {
	// Notify posts ping notifications; nil makes a client that reaches public addresses only
	// (internal/netguard).
	Notify *http.Client
	// Approvals starts requests; token exchange shares it (NewApprovals). nil makes one.
	Approvals *Approvals
}

type flow struct {
	*Approvals
	notify *http.Client
}

// Register mounts the backchannel authentication endpoint and the approvals page, and
// registers the CIBA grant with grant (the server's token endpoint).
func Register(rt site.Router, grant func(string, oauth.GrantHandler), env *site.Env, st Store, o Options) {
	f := &flow{Approvals: o.Approvals, notify: o.Notify}
	if f.Approvals == nil {
		f.Approvals = NewApprovals(env, st)
	}
	if f.notify == nil {
		f.notify = publicClient()
	}
	rt.API("POST "+Path, http.HandlerFunc(f.authenticate))
	grant(GrantType, oauth.GrantFunc(f.grant))
	rt.Page("GET "+PagePath, http.HandlerFunc(f.page))
	rt.Page("POST "+DecidePath, http.HandlerFunc(f.decide))
	rt.Page("POST "+BlockPath, http.HandlerFunc(f.block))
	rt.Page("POST "+UnblockPath, http.HandlerFunc(f.unblock))
}
