package exchange

import (
	"net/url"
	"strings"
	"unicode"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
)

// AccountParam is the token-exchange request's extension parameter (RFC 8693 §2.1 lets a
// server define more) that names which of the person's accounts at the service the agent
// wants: the account's id or its name at the service (docs/several-accounts.md,
// docs/decisions/0059). Without it the agent gets the account the person allowed it, and of
// several, the person's default.
const AccountParam = "account"

// maxAccount bounds the account parameter; service account ids and names are far shorter.
const maxAccount = 256

// readAccount reads the account parameter; "" when the request names none.
func readAccount(f url.Values) (string, error) {
	a := f.Get(AccountParam)
	if len(a) > maxAccount {
		return "", oauth.ErrInvalidRequest.WithDescription("account is too long")
	}
	if strings.IndexFunc(a, unicode.IsControl) >= 0 {
		return "", oauth.ErrInvalidRequest.WithDescription("account must not contain control characters")
	}
	return a, nil
}

// errAmbiguous: two of the person's accounts at the service have the name the agent sent.
var errAmbiguous = oauth.ErrInvalidRequest.WithDescription("several of the person's accounts have that name; name the account by its id")

// findAccount finds the account named among the person's own connections to the service: an
// exact match of the service's account id first, else a case-insensitive match of its name
// (service logins and e-mail addresses are case-insensitive). Connections are the token's
// person's only, so another person's account never matches.
func findAccount(conns []store.Connection, account string) (store.Connection, bool, error) {
	for _, c := range conns {
		if c.AccountID == account {
			return c, true, nil
		}
	}
	var found store.Connection
	n := 0
	for _, c := range conns {
		if c.AccountName != "" && strings.EqualFold(c.AccountName, account) {
			found, n = c, n+1
		}
	}
	if n > 1 {
		return store.Connection{}, false, errAmbiguous
	}
	return found, n == 1, nil
}

// decideAccount is decide for a request that names an account: that account if the agent may
// use it and it works; else the link for exactly that account (connect it, allow the agent to
// use it, or reconnect it).
func decideAccount(access store.AgentAccess, account string) (store.Connection, store.LinkKind, error) {
	if account == "" {
		conn, kind := decide(access)
		return conn, kind, nil
	}
	conn, ok, err := findAccount(access.Connections, account)
	switch {
	case err != nil:
		return store.Connection{}, "", err
	case !ok:
		return store.Connection{}, store.LinkConnect, nil
	case conn.Status.NeedsPerson():
		return conn, store.LinkReconnect, nil
	case !access.MayUse(conn.ID):
		return store.Connection{}, store.LinkAllow, nil
	}
	return conn, "", nil
}
