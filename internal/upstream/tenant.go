package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
)

// ErrTenant: the ID token is from a tenant the connector does not admit (AllowedTenants).
var ErrTenant = errors.New("upstream: the account's tenant is not allowed")

// TenantPlaceholder is what a multi-tenant identity provider's discovery document puts in its
// issuer where each ID token's tenant goes (Microsoft's common and organizations documents:
// https://login.microsoftonline.com/{tenantid}/v2.0).
const TenantPlaceholder = "{tenantid}"

// tenantRE is what a tenant value may look like before it is put into an issuer: a GUID or a
// domain, never a path.
var tenantRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,127}$`)

// discovery is what Latchkey reads of an OpenID Provider's metadata for a connector whose
// issuer is templated by tenant.
type discovery struct {
	Issuer       string `json:"issuer"`
	JWKSURI      string `json:"jwks_uri"`
	ISSSupported bool   `json:"authorization_response_iss_parameter_supported"`
}

// discover reads the discovery document at c.OIDCIssuer through the client in ctx. Unlike
// OpenID Connect Discovery §4.3, the issuer it names may differ from c.OIDCIssuer (a template,
// or a tenant id where c names the tenant by domain), but only on the same origin: the document
// is fetched over TLS from the configured host, which is who may speak for its tenants. Its
// jwks_uri must be https (or the loopback http the endpoints allow) too.
func discover(ctx context.Context, c *config.Connector) (discovery, error) {
	hc, _ := ctx.Value(oauth2.HTTPClient).(*http.Client)
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.OIDCIssuer, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return discovery{}, fail(ErrService, "OIDC discovery: the issuer is not a URL", nil)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return discovery{}, classify(ctx, "OIDC discovery", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return discovery{}, classify(ctx, "OIDC discovery", err)
	}
	if resp.StatusCode != http.StatusOK {
		return discovery{}, classify(ctx, "OIDC discovery", &statusError{resp.StatusCode})
	}
	var d discovery
	if json.Unmarshal(b, &d) != nil || d.Issuer == "" || d.JWKSURI == "" {
		return discovery{}, fail(ErrService, "OIDC discovery: the document lacks issuer or jwks_uri", nil)
	}
	if !sameOrigin(d.Issuer, c.OIDCIssuer) || !sameOrigin(d.JWKSURI, c.OIDCIssuer) {
		return discovery{}, fail(ErrIssuer, "OIDC discovery: the document names an issuer or key set of another origin", nil)
	}
	return d, nil
}

func sameOrigin(a, b string) bool {
	// The placeholder is not valid in a URL's path for every parser; it never touches the origin.
	ua, err1 := url.Parse(strings.ReplaceAll(a, TenantPlaceholder, "t"))
	ub, err2 := url.Parse(strings.ReplaceAll(b, TenantPlaceholder, "t"))
	return err1 == nil && err2 == nil && ua.Scheme == ub.Scheme && ua.Host != "" && strings.EqualFold(ua.Host, ub.Host)
}

// issuerFor is the issuer an ID token of tenant must carry: the discovered issuer with its
// placeholder filled. ok is false for a tenant value that could change more than that segment.
func issuerFor(discovered, tenant string) (string, bool) {
	if !tenantRE.MatchString(tenant) {
		return "", false
	}
	return strings.ReplaceAll(discovered, TenantPlaceholder, tenant), true
}

// tenantAllowed applies c.AllowedTenants (unset: every tenant). Tenant ids are GUIDs that
// services print in either case.
func tenantAllowed(c *config.Connector, tenant string) bool {
	return len(c.AllowedTenants) == 0 || slices.ContainsFunc(c.AllowedTenants, func(t string) bool { return strings.EqualFold(t, tenant) })
}

// verifyTenantIDToken verifies an ID token of a connector whose issuer is templated by tenant
// (c.TenantClaim): signature by the discovered key set, audience c.ClientID, expiry, and then
// the issuer, which must be the discovered issuer with the token's own tenant claim filled in.
// So a token whose iss names another tenant than its claim is refused (ErrIssuer), as is a
// token of a tenant the connector does not admit (ErrTenant).
func verifyTenantIDToken(ctx context.Context, c *config.Connector, raw string) (map[string]any, error) {
	d, err := discover(ctx, c)
	if err != nil {
		return nil, err
	}
	keys := oidc.NewRemoteKeySet(ctx, d.JWKSURI)
	// The issuer is checked below, against the token's own tenant; everything else as usual.
	v := oidc.NewVerifier(d.Issuer, keys, &oidc.Config{ClientID: c.ClientID, SkipIssuerCheck: true})
	idt, err := v.Verify(ctx, raw)
	if err != nil {
		return nil, classify(ctx, "id_token verification", err)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, fail(ErrService, "id_token claims are not a JSON object", nil)
	}
	tenant, _ := claims[c.TenantClaim].(string)
	want, ok := issuerFor(d.Issuer, tenant)
	if !ok || idt.Issuer != want {
		return nil, fail(ErrIssuer, "the id_token's issuer is not the issuer of its own tenant", nil)
	}
	if !tenantAllowed(c, tenant) {
		return nil, fail(ErrTenant, "the id_token's tenant is not in the connector's allowedTenants", nil)
	}
	return claims, nil
}

// checkTenantIssuer is CheckIssuer's RFC 9207 check for a connector whose issuer is templated
// by tenant: a response's iss must be the discovered issuer for some tenant the connector
// admits. Which tenant the person belongs to is pinned later, by the ID token.
func checkTenantIssuer(ctx context.Context, hc *http.Client, c *config.Connector, iss string, present bool) error {
	d, err := tenantDiscovery(ctx, hc, c)
	if err != nil {
		return err
	}
	if !present {
		if d.ISSSupported {
			return fail(ErrIssuer, "the response has no iss, though the service's metadata says it sends one", nil)
		}
		return nil
	}
	prefix, suffix, templated := strings.Cut(d.Issuer, TenantPlaceholder)
	if !templated {
		if iss != d.Issuer {
			return fail(ErrIssuer, "the response's iss is not the connector's issuer", nil)
		}
		return nil
	}
	tenant, ok := strings.CutPrefix(iss, prefix)
	if ok {
		tenant, ok = strings.CutSuffix(tenant, suffix)
	}
	if !ok || !tenantRE.MatchString(tenant) || !tenantAllowed(c, tenant) {
		return fail(ErrIssuer, "the response's iss is not the issuer of a tenant the connector admits", nil)
	}
	return nil
}

// tenantDiscoveries caches discover for checkTenantIssuer by issuer and address allowance, as
// issPromises does for promisesISS, so requests to a callback cannot make the server fetch the
// document each time.
var tenantDiscoveries sync.Map // string -> tenantDiscoveryEntry

type tenantDiscoveryEntry struct {
	d     discovery
	until time.Time
}

func tenantDiscovery(ctx context.Context, hc *http.Client, c *config.Connector) (discovery, error) {
	key := c.OIDCIssuer + "\x00" + fmt.Sprint(c.AllowedNetworks)
	if v, ok := tenantDiscoveries.Load(key); ok && time.Now().Before(v.(tenantDiscoveryEntry).until) {
		return v.(tenantDiscoveryEntry).d, nil
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	ctx, err := withClient(ctx, hc, c)
	if err != nil {
		return discovery{}, classify(ctx, "OIDC discovery", err)
	}
	d, err := discover(ctx, c)
	if err != nil {
		return discovery{}, err
	}
	tenantDiscoveries.Store(key, tenantDiscoveryEntry{d: d, until: time.Now().Add(issPromiseTTL)})
	return d, nil
}
