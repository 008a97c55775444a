package upstream

import (
	"net/url"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

func TestAnotherAccount(t *testing.T) {
	google := &config.Connector{AuthURL: "https://accounts.example/auth", ClientID: "c", CallbackURL: "https://latchkey.example/cb",
		AuthParams:          map[string]string{"prompt": "consent", "access_type": "offline"},
		SelectAccountParams: map[string]string{"prompt": "select_account", "redirect_uri": "https://evil.example/"},
		AccountHintParam:    "login_hint"}
	plain := &config.Connector{AuthURL: "https://gitlab.example/oauth/authorize", ClientID: "c", CallbackURL: "https://latchkey.example/cb"}
	hintOnly := &config.Connector{AuthURL: "https://x.example/auth", ClientID: "c", CallbackURL: "https://latchkey.example/cb", AccountHintParam: "state"}
	for _, tc := range []struct {
		name    string
		c       *config.Connector
		another bool
		hint    string
		want    map[string]string
	}{
		{"prompt joins the one asked for", google, true, "", map[string]string{"prompt": "consent select_account", "login_hint": ""}},
		{"with a hint", google, true, "alice@example.com", map[string]string{"prompt": "consent select_account", "login_hint": "alice@example.com"}},
		{"hint alone", google, false, "alice@example.com", map[string]string{"prompt": "consent", "login_hint": "alice@example.com"}},
		{"a reserved parameter is never set", google, true, "", map[string]string{"redirect_uri": "https://latchkey.example/cb"}},
		{"a service without a picker is unchanged", plain, true, "alice", map[string]string{"prompt": "", "login_hint": "", "login": ""}},
		{"a hint parameter that is reserved is not used", hintOnly, true, "alice", map[string]string{"state": "st"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := AnotherAccount(AuthURL(tc.c, "st", NewVerifier()), tc.c, tc.another, tc.hint)
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got := u.Query().Get(k); got != v {
					t.Errorf("%s = %q, want %q (%s)", k, got, v, raw)
				}
			}
		})
	}
}
