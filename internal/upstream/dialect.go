package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"latchkey.dev/latchkey/internal/config"
)

// A service's dialect (docs/decisions/0056) is what it does differently from RFC 6749 at the
// wire: extra headers on every call, a token request sent as JSON, tokens nested in the token
// answer. x/oauth2 still builds every token request and reads every answer (its error
// handling, expiry and refresh are what the vault relies on); dialect is a RoundTripper under
// it that translates, so there is one code path for every service. It sits above the address
// guard: it changes what is sent, never where.
type dialect struct {
	base http.RoundTripper
	c    *config.Connector
}

// needsDialect reports whether c talks anything but RFC 6749.
func needsDialect(c *config.Connector) bool {
	return len(c.Headers) > 0 || c.TokenRequestJSON || c.AccessTokenField != "" ||
		c.TokenAuth == config.TokenAuthPrivateKeyJWT || c.RefreshURL != ""
}

// tokenFields are what an RFC 6749 token answer says about the token (§5.1), moved together
// when the access token is nested.
var tokenFields = []string{"access_token", "token_type", "expires_in", "refresh_token", "scope"}

func (d dialect) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range d.c.Headers {
		r.Header.Set(k, v)
	}
	atToken := r.Method == http.MethodPost &&
		(sameEndpoint(r.URL, d.c.TokenURL) || (d.c.RefreshURL != "" && sameEndpoint(r.URL, d.c.RefreshURL)))
	atRevocation := r.Method == http.MethodPost && d.c.RevocationURL != "" && sameEndpoint(r.URL, revocationURL(d.c))
	var form url.Values
	if (atToken || atRevocation) && isForm(r.Header.Get("Content-Type")) && r.GetBody != nil {
		body, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(body, maxBody))
		body.Close()
		if err != nil {
			return nil, err
		}
		if form, err = url.ParseQuery(string(b)); err != nil {
			return nil, err
		}
		if d.c.TokenAuth == config.TokenAuthPrivateKeyJWT && d.c.Assertion != nil {
			// RFC 7523 §2.2: the assertion is the client's credential, one per request; a
			// client secret never goes along.
			a, err := clientAssertion(r, d.c)
			if err != nil {
				return nil, err
			}
			form.Del("client_secret")
			form.Set("client_id", d.c.ClientID)
			form.Set("client_assertion_type", ClientAssertionType)
			form.Set("client_assertion", a)
			r.Header.Del("Authorization")
		}
		enc, ct := []byte(form.Encode()), "application/x-www-form-urlencoded"
		if d.c.TokenRequestJSON {
			obj := make(map[string]string, len(form))
			for k := range form {
				obj[k] = form.Get(k)
			}
			enc, _ = json.Marshal(obj)
			ct = "application/json"
		}
		r.Body = io.NopCloser(bytes.NewReader(enc))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(enc)), nil }
		r.ContentLength = int64(len(enc))
		r.Header.Set("Content-Type", ct)
	}
	resp, err := d.base.RoundTrip(r)
	if err != nil || !atToken || d.c.AccessTokenField == "" || d.c.AccessTokenField == "access_token" {
		return resp, err
	}
	return liftToken(resp, d.c.AccessTokenField, form.Get("grant_type") == "refresh_token")
}

// liftToken rewrites a JSON token answer whose access token sits at path (Slack's user token,
// "authed_user.access_token") into the RFC 6749 shape x/oauth2 reads: the access token and
// its siblings move to the top level, replacing whatever was there (Slack's top-level token
// is the app's bot token, never to be handed out as the person's). The token is a bearer token
// whatever token_type its service calls it ("user" at Slack), in a refresh answer too.
//
// An answer to a code exchange without the nested token loses its top-level token too, so
// x/oauth2 reports the token missing rather than taking another one. An answer to a refresh is
// left as it is when nothing is nested: services answer a refresh for the one token refreshed,
// at the top level (Slack does).
func liftToken(resp *http.Response, path string, refresh bool) (*http.Response, error) {
	if resp.StatusCode/100 != 2 {
		return resp, nil
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
		return resp, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	top, ok := jsonObject(b)
	if !ok {
		// Not a JSON object: x/oauth2 reads it and reports what is wrong.
		return withBody(resp, b), nil
	}
	dir, leaf := "", path
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		dir, leaf = path[:i], path[i+1:]
	}
	parent := top
	if dir != "" {
		parent = nil
		var raw any
		_ = json.Unmarshal(b, &raw)
		if obj, ok := lookup(asMap(raw), dir).(map[string]any); ok {
			parent = make(map[string]json.RawMessage, len(obj))
			for k, v := range obj {
				parent[k], _ = json.Marshal(v)
			}
		}
	}
	var at string
	if parent != nil {
		_ = json.Unmarshal(parent[leaf], &at)
	}
	if at == "" {
		if refresh {
			if _, ok := top["access_token"]; ok {
				top["token_type"] = json.RawMessage(`"Bearer"`)
			}
			out, _ := json.Marshal(top)
			return withBody(resp, out), nil
		}
		// Neither the nested token nor anything else is taken.
		for _, f := range tokenFields {
			delete(top, f)
		}
		out, _ := json.Marshal(top)
		return withBody(resp, out), nil
	}
	for _, f := range tokenFields {
		delete(top, f)
		if v, ok := parent[f]; ok && f != "access_token" && f != "token_type" {
			top[f] = v
		}
	}
	top["access_token"], _ = json.Marshal(at)
	top["token_type"] = json.RawMessage(`"Bearer"`)
	out, _ := json.Marshal(top)
	return withBody(resp, out), nil
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func withBody(resp *http.Response, b []byte) *http.Response {
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return resp
}

func isForm(ct string) bool {
	m, _, _ := mime.ParseMediaType(ct)
	return m == "application/x-www-form-urlencoded"
}

// sameEndpoint reports whether u is the endpoint configured as raw (query aside).
func sameEndpoint(u *url.URL, raw string) bool {
	e, err := url.Parse(raw)
	if err != nil {
		return false
	}
	return u.Scheme == e.Scheme && u.Host == e.Host && u.EscapedPath() == e.EscapedPath()
}

// revocationURL is c's revocation endpoint with "{client_id}" filled in.
func revocationURL(c *config.Connector) string {
	return strings.ReplaceAll(c.RevocationURL, "{client_id}", url.PathEscape(c.ClientID))
}

// jsonObject decodes b as a JSON object, reporting whether it is one.
func jsonObject(b []byte) (map[string]json.RawMessage, bool) {
	var top map[string]json.RawMessage
	return top, json.Unmarshal(b, &top) == nil
}
