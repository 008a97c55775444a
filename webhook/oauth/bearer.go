package oauth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// BearerToken returns the token of an "Authorization: Bearer" header (RFC 6750 §2.1), or "".
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return ""
	}
	return strings.TrimSpace(h[7:])
}

// LookupAccessToken finds a live access token of the project by the string a client
// presented (opaque or JWT: both are stored by hash, so a revoked JWT is dead here too). Any
// failure is ErrInvalidToken, except a store failure, which is server_error.
func LookupAccessToken(ctx context.Context, env *site.Env, st ResourceStore, p *config.Project, raw string, now time.Time) (store.Token, error) {
	if raw == "" {
		return store.Token{}, ErrInvalidToken.WithDescription("no access token")
	}
	t, err := st.GetToken(ctx, secret.Hash(raw))
	if errors.Is(err, store.ErrNotFound) {
		return store.Token{}, ErrInvalidToken.WithDescription("the access token is invalid")
	}
	if err != nil {
		return store.Token{}, Internal(err)
	}
	if t.Kind != store.AccessToken || t.Project != p.Key || !t.Active(now) || p.ClientGone(t.ClientID) {
		return store.Token{}, ErrInvalidToken.WithDescription("the access token is invalid")
	}
	refused, err := env.ClientRefused(ctx, p, t.ClientID)
	if err != nil {
		return store.Token{}, Internal(err)
	}
	if refused != nil {
		return store.Token{}, ErrInvalidToken.WithDescription(refused.Error())
	}
	return t, nil
}
