package oauth

import (
	"errors"
	"net/http"
	"slices"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

type userinfoResponse struct {
	Sub   string `json:"sub"`
	Email string `json:"email,omitempty"`
	Name  string `json:"name,omitempty"`
}

// userinfo says who an access token is for. As in OpenID Connect, the email needs the email
// scope and the name the profile scope; the subject is always there. A token issued to a
// client for itself (client_credentials) is for nobody and gets invalid_token.
func userinfo(env *site.Env, st Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := site.Project(r)
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			WriteError(w, ErrMethodNotAllowed.WithDescription("use GET or POST"))
			return
		}
		t, err := ResourceAccessToken(r.Context(), env, st, w, r, p, p.Issuer+"/userinfo", env.Now())
		if err != nil {
			logFail(env, w, p, "userinfo", err)
			return
		}
		if t.Subject == "" {
			WriteError(w, ErrInvalidToken.WithDescription("the access token is not for a person"))
			return
		}
		person, err := st.GetPerson(r.Context(), p.Key, t.Subject)
		if errors.Is(err, store.ErrNotFound) || (err == nil && !site.PersonActive(p, person)) {
			// Gone, or no longer let in by the project's sign-in: the token speaks for nobody.
			WriteError(w, ErrInvalidToken.WithDescription("the access token is invalid"))
			return
		}
		if err != nil {
			logFail(env, w, p, "userinfo", Internal(err))
			return
		}
		out := userinfoResponse{Sub: person.ID}
		if slices.Contains(t.Scopes, "email") {
			out.Email = person.Email
		}
		if slices.Contains(t.Scopes, "profile") {
			out.Name = person.Name
		}
		WriteJSON(w, http.StatusOK, out)
	}
}
