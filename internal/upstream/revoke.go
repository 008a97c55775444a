package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

// Revoke ends the connection's authorization at the service, for a person who disconnects. A
// connector without a RevocationURL has nothing to call and succeeds. A token the service no
// longer knows counts as revoked. Callers delete the connection whatever this returns: a
// service that cannot be reached must not keep a person from disconnecting.
//
// "{client_id}" in the RevocationURL is replaced by the client id. RevocationStyle GitHubGrant
// (the github preset) uses GitHub's own endpoint (DELETE /applications/{client_id}/grant with
// the app's basic credentials and the token in a JSON body), which also withdraws the approval
// so GitHub asks again next time. RevocationStyle Bearer (the dropbox preset) presents the
// access token as its own credential (revokeBearer). Any other connector gets RFC 7009
// revocation of each token
// held, the client authenticated as at the token endpoint (c.TokenAuth; a private_key_jwt
// client sends a fresh client assertion, added by the dialect transport).
func (v *Vault) Revoke(ctx context.Context, c *config.Connector, conn store.Connection) error {
	if c.RevocationURL == "" {
		return nil
	}
	at, rt, err := v.open(&conn)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(WithClock(ctx, v.Now), v.timeout())
	defer cancel()
	switch c.RevocationStyle {
	case config.RevokeGitHubGrant:
		return v.revokeGitHub(ctx, c, at)
	case config.RevokeBearer:
		return v.revokeBearer(ctx, c, conn, at, rt)
	}
	var errs []error
	if rt != "" {
		errs = append(errs, v.revokeRFC7009(ctx, c, rt, "refresh_token"))
	}
	errs = append(errs, v.revokeRFC7009(ctx, c, at, "access_token"))
	return errors.Join(errs...)
}

func (v *Vault) revokeGitHub(ctx context.Context, c *config.Connector, access string) error {
	body, _ := json.Marshal(map[string]string{"access_token": access})
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, revocationURL(c), bytes.NewReader(body))
	if err != nil {
		return fail(ErrService, "revocation: the URL is not usable", nil)
	}
	req.SetBasicAuth(c.ClientID, c.ClientSecret)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Content-Type", "application/json")
	return v.doRevoke(ctx, c, req, http.StatusNotFound, http.StatusUnprocessableEntity)
}

// revokeBearer is Dropbox's auth/token/revoke: the access token revokes itself, presented as
// the Bearer credential of a POST without a body, and takes its refresh token with it. An access
// token that has expired cannot do that, so one is refreshed first (and used only for this); a
// 401 then means the service no longer knows the token.
func (v *Vault) revokeBearer(ctx context.Context, c *config.Connector, conn store.Connection, access, refresh string) error {
	if !fresh(conn, v.now()) && refresh != "" {
		tok, err := v.refresh(ctx, c, refresh)
		if err != nil {
			if rejected(err) {
				return nil // the refresh token is dead already: nothing is left to revoke
			}
			return err
		}
		access = tok.AccessToken
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, revocationURL(c), nil)
	if err != nil {
		return fail(ErrService, "revocation: the URL is not usable", nil)
	}
	req.Header.Set("Authorization", "Bearer "+access)
	return v.doRevoke(ctx, c, req, http.StatusUnauthorized)
}

// revokeRFC7009 posts one token. Its form becomes JSON on the way for a connector whose token
// requests are JSON (the dialect transport). RFC 7009 §2.2 answers 200 for a token the server
// no longer knows; Salesforce answers 400 invalid_token instead (its refresh token's
// revocation ends the access token first), which counts as revoked too.
func (v *Vault) revokeRFC7009(ctx context.Context, c *config.Connector, tok, hint string) error {
	form := url.Values{"token": {tok}, "token_type_hint": {hint}}
	basic := c.TokenAuth == config.TokenAuthBasic && c.ClientSecret != ""
	if !basic {
		form.Set("client_id", c.ClientID)
		if c.ClientSecret != "" && c.TokenAuth != config.TokenAuthNone {
			form.Set("client_secret", c.ClientSecret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, revocationURL(c), strings.NewReader(form.Encode()))
	if err != nil {
		return fail(ErrService, "revocation: the URL is not usable", nil)
	}
	if basic {
		// RFC 6749 §2.3.1: both encoded as a form would, then Basic.
		req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(c.ClientSecret))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return v.doRevoke(ctx, c, req, goneInvalidToken)
}

// goneInvalidToken, as a "gone" status, is 400 with the error invalid_token.
const goneInvalidToken = -http.StatusBadRequest

// doRevoke sends req; any 2xx, or one of gone (the service's way of saying it no longer knows
// the token; goneInvalidToken for a 400 whose JSON error is invalid_token), is success.
func (v *Vault) doRevoke(ctx context.Context, c *config.Connector, req *http.Request, gone ...int) error {
	hc, err := client(v.HTTP, c)
	if err != nil {
		return classify(ctx, "revocation", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return classify(ctx, "revocation", err)
	}
	defer resp.Body.Close()
	// Reading all of it lets the connection be reused; a failed read costs only that.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	for _, g := range gone {
		if resp.StatusCode == g {
			return nil
		}
		if g == goneInvalidToken && resp.StatusCode == http.StatusBadRequest {
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(body, &e) == nil && e.Error == "invalid_token" {
				return nil
			}
		}
	}
	return classify(ctx, "revocation", &statusError{resp.StatusCode})
}
