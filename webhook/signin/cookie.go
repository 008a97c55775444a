package signin

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

// Cookie names carry a short hash of the project key, because over https every project's
// cookies share Path=/ (the __Host- prefix demands it) on one host.
func projectTag(p *config.Project) string {
	sum := sha256.Sum256([]byte(p.Key))
	return hex.EncodeToString(sum[:4])
}

// CookieName is the name of one of the project's cookies: "__Host-latchkey_<base>_<tag>" over
// https, "latchkey_<base>_<tag>" otherwise.
func CookieName(env *site.Env, p *config.Project, base string) string {
	n := "latchkey_" + base + "_" + projectTag(p)
	if env.Secure() {
		return "__Host-" + n
	}
	return n
}

// SetCookie sets one of the project's cookies: HttpOnly, SameSite=Lax (so it rides the
// top-level navigation back from another site), Secure with the __Host- prefix over https, and
// otherwise scoped to the issuer's path. maxAge 0 makes a browser-session cookie; negative
// deletes it.
func SetCookie(w http.ResponseWriter, env *site.Env, p *config.Project, base, value string, maxAge time.Duration) {
	c := &http.Cookie{
		Name:     CookieName(env, p, base),
		Value:    value,
		Path:     "/",
		HttpOnly: true,
		Secure:   env.Secure(),
		SameSite: http.SameSiteLaxMode,
	}
	if !env.Secure() {
		c.Path = site.IssuerPath(p) + "/"
	}
	switch {
	case maxAge < 0:
		c.MaxAge = -1
	case maxAge > 0:
		c.MaxAge = int(maxAge / time.Second)
	}
	http.SetCookie(w, c)
}

// ReadCookie returns the value of one of the project's cookies, or "".
func ReadCookie(r *http.Request, env *site.Env, p *config.Project, base string) string {
	c, err := r.Cookie(CookieName(env, p, base))
	if err != nil {
		return ""
	}
	return c.Value
}
