// Package links is the connect link (docs/connections-for-agents.md): the record a token-exchange
// refusal points to, and the page {issuer}/account/services/link/{code} that checks who opened it
// before it offers anything.
//
// A link joins two identities: the person the agent works for (known when the link is made)
// and that person's account at a service such as GitHub (supplied later by whoever opens the
// link). So the page goes down five checks, in this order, before it shows anything:
//
//  1. the code is one this server issued and the link is open; an unknown, expired, declined,
//     finished or replaced code gets the one 404 page, byte for byte, after the same work
//     (one hash, one indexed lookup);
//  2. someone is signed in to the project, else sign-in and back;
//  3. that someone is the person the link was made for, else a page saying the link was made for
//     another account, nothing changes, and a link.wrong_person security event is recorded;
//  4. they signed in within the project's RecentSignIn (15 minutes), else sign in again;
//  5. only then: connect the service (and let the agent use it), let the agent use an account
//     already connected, or reconnect a broken one; or decline, which closes the link.
//
// The POST handlers run checks 1–4 again, then require the session's form token (on top of the
// router's cross-origin protection). Finishing tells the person to go back to the agent and
// redirects nowhere; the agent learns the outcome by asking again.
//
// The code is 32 random bytes (base64url, 43 characters) and signs nobody in. The store holds
// its SHA-256 (to find the link) and the code sealed with the Keyring under a purpose bound to
// the link (so the server can hand the same link out again while it is open); a database read
// alone cannot open a link.
package links

import (
	"context"
	"net/http"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/apikey"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

// PathPrefix is the link page's path under the issuer; the code follows it.
const PathPrefix = "/account/services/link/"

// maxFormBytes bounds the link page's forms; they carry a token and an id.
const maxFormBytes = 8 << 10

// BeginFunc starts connecting subject to connector c in the browser of r and returns the
// service's authorization URL (callback.Begin).
type BeginFunc func(w http.ResponseWriter, r *http.Request, env *site.Env, st callback.BeginStore, p *config.Project, c *config.Connector, subject, purpose, linkID string, opts ...callback.BeginOption) (string, error)

// Options configure the link page.
type Options struct {
	// Begin defaults to callback.Begin.
	Begin BeginFunc
	// Keys checks and saves the keys pasted for API-key connectors; it defaults to keys saved
	// with this package's Hook alone.
	Keys *apikey.Keys
}

type handler struct {
	env   *site.Env
	store Store
	begin BeginFunc
	keys  *apikey.Keys
}

// Register mounts the link page and its three actions with the default options.
func Register(rt site.Router, env *site.Env, st Store) { Mount(rt, env, st, Options{}) }

// Mount mounts the link page and its actions:
//
//	GET  /account/services/link/{code}          the five checks, then the offer
//	POST /account/services/link/{code}/connect  connect (or reconnect) at the service
//	POST /account/services/link/{code}/allow    let the agent use connection_id
//	POST /account/services/link/{code}/decline  close the link
//	GET  /account/services/link/{code}/api-key  the key form of an API-key connector
//	POST /account/services/link/{code}/api-key  check the key, save it, let the agent use it
func Mount(rt site.Router, env *site.Env, st Store, o Options) {
	h := &handler{env: env, store: st, begin: o.Begin, keys: o.Keys}
	if h.begin == nil {
		h.begin = callback.Begin
	}
	if h.keys == nil {
		h.keys = apikey.New(env, st, Hook(env, st))
	}
	rt.Page("GET "+PathPrefix+"{code}/api-key", http.HandlerFunc(h.keyPage))
	rt.Page("POST "+PathPrefix+"{code}/api-key", http.HandlerFunc(h.keyPost))
	rt.Page("GET "+PathPrefix+"{code}", http.HandlerFunc(h.page))
	rt.Page("POST "+PathPrefix+"{code}/connect", http.HandlerFunc(h.connect))
	rt.Page("POST "+PathPrefix+"{code}/allow", http.HandlerFunc(h.allow))
	rt.Page("POST "+PathPrefix+"{code}/decline", http.HandlerFunc(h.decline))
}

// Texts says what a link is for, in the words of the token-exchange refusal: the
// error_description (for developers, about the person) and the connect_message (for the person,
// naming the service and the agent). The description stays English, being for machines and
// developers; the message is in lang, the Project's default language (spec.defaultLanguage), since
// the agent relays it to a person whose browser the server does not see.
func Texts(kind store.LinkKind, service, agent, lang string) (description, message string) {
	svc, ag := service, agent
	if service == "" {
		service, svc = "the service", pages.Sprintf(lang, "the service")
	}
	if agent == "" {
		agent, ag = "this agent", pages.Sprintf(lang, "this agent")
	}
	switch kind {
	case store.LinkAllow:
		return "the person has not allowed " + agent + " to use their " + service + " account",
			pages.Sprintf(lang, "Open this link to let %s use your %s account.", ag, svc)
	case store.LinkReconnect:
		return "the person's " + service + " connection stopped working",
			pages.Sprintf(lang, "Open this link to reconnect your %s account so %s can use it again.", svc, ag)
	default:
		return "the person has not connected " + article(service) + " " + service + " account",
			pages.Sprintf(lang, "Open this link to connect your %s account and let %s use it.", svc, ag)
	}
}

// AccountTexts is Texts for a request that named an account ("" is Texts): the description and
// the message name the account, so the person knows which one the agent asks for.
func AccountTexts(kind store.LinkKind, service, agent, account, lang string) (description, message string) {
	if account == "" {
		return Texts(kind, service, agent, lang)
	}
	svc, ag := service, agent
	if service == "" {
		service, svc = "the service", pages.Sprintf(lang, "the service")
	}
	if agent == "" {
		agent, ag = "this agent", pages.Sprintf(lang, "this agent")
	}
	switch kind {
	case store.LinkAllow:
		return "the person has not allowed " + agent + " to use their " + service + " account " + account,
			pages.Sprintf(lang, "Open this link to let %s use your %s account %s.", ag, svc, account)
	case store.LinkReconnect:
		return "the person's " + service + " connection of the account " + account + " stopped working",
			pages.Sprintf(lang, "Open this link to reconnect your %s account %s so %s can use it again.", svc, account, ag)
	default:
		return "the person has not connected the " + service + " account " + account,
			pages.Sprintf(lang, "Open this link to connect your %s account %s and let %s use it.", svc, account, ag)
	}
}

// article is "a" or "an" for a service name; names are short proper nouns, so the first letter
// decides well enough ("an Atlassian account", "a GitHub account").
func article(name string) string {
	if name != "" && strings.ContainsRune("AEIOUaeiou", rune(name[0])) {
		return "an"
	}
	return "a"
}

// ServiceName is how pages and messages name a connector.
func ServiceName(c *config.Connector) string {
	switch {
	case c == nil:
		return ""
	case c.DisplayName != "":
		return c.DisplayName
	default:
		return c.Name
	}
}

// AgentName is how pages and messages name an agent: its name, or its id when it has none.
func AgentName(c *site.Client) string {
	if c == nil {
		return ""
	}
	if c.Name != "" {
		return c.Name
	}
	return c.ID
}

// Path is the link page's path for code under project p.
func Path(p *config.Project, code string) string { return site.IssuerPath(p) + PathPrefix + code }

// URI is the link's absolute address: {issuer}/account/services/link/{code}.
func URI(p *config.Project, code string) string { return p.Issuer + PathPrefix + code }

// HookFunc has the shape of the callback's connection-saved hook.
type HookFunc = func(ctx context.Context, p *config.Project, st store.CallbackState, conn store.Connection) error
