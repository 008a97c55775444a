package oauth

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/workload"
	"latchkey.dev/latchkey/webhook/site"
)

// SPIFFEAssertionType is the client_assertion_type of a SPIFFE JWT-SVID
// (draft-ietf-oauth-spiffe-client-auth §4). A Kubernetes ServiceAccount token is sent as an
// RFC 7523 assertion (AssertionType).
const SPIFFEAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-spiffe"

// workloadClient finds the workload_identity client a client assertion is for. Neither a
// ServiceAccount token nor a JWT-SVID names the client (their sub is the workload), so the
// request names it in client_id (RFC 7521 §4.2). ok is false for an RFC 7523 assertion of any
// other client, which authenticateAssertion then checks as private_key_jwt or
// client_secret_jwt. Workload clients are declared OAuthClients: no database read.
func workloadClient(p *config.Project, form url.Values, typ, raw string) (c *site.Client, ok bool, err error) {
	id := form.Get("client_id")
	if id == "" {
		if sub, _ := workload.Subject(raw); typ == SPIFFEAssertionType || strings.HasPrefix(sub, "system:serviceaccount:") {
			return nil, true, ErrInvalidClient.WithDescription("client_id is required with a workload's token: its sub names the workload, not the client")
		}
		return nil, false, nil
	}
	cc := p.Clients[id]
	switch {
	case cc == nil && typ == SPIFFEAssertionType:
		return nil, true, failed("unknown_client")
	case cc == nil || cc.Workload == nil:
		if typ == SPIFFEAssertionType {
			return nil, true, failed("method_not_allowed")
		}
		return nil, false, nil
	}
	// Each kind has its own assertion type: a JWT-SVID is not an RFC 7523 assertion of its
	// client (no iss, no jti), and a ServiceAccount token is not a JWT-SVID.
	if (typ == SPIFFEAssertionType) != (cc.Workload.SPIFFEID != "") {
		return nil, true, failed("method_not_allowed")
	}
	return site.FromConfig(cc), true, nil
}

// authenticateWorkload authenticates a workload_identity client by its workload's token, whose
// aud must be this issuer alone (docs/decisions/0078). The token is reused by the workload until
// its platform rotates it, so unlike a private_key_jwt assertion it is not spent once.
func authenticateWorkload(ctx context.Context, env *site.Env, p *config.Project, c *site.Client, raw string) (*site.Client, error) {
	_, err := VerifyWorkload(ctx, env, c.Workload, p.Issuer, raw)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// VerifyWorkload verifies raw as a token of w for audience and returns the workload it proves,
// or the OAuth error to answer with: invalid_client for a refused token (its description
// saying what is wrong only where that is the token's shape, not whom it names), and
// temporarily_unavailable when the cluster cannot be asked.
func VerifyWorkload(ctx context.Context, env *site.Env, w *config.Workload, audience, raw string) (*workload.Identity, error) {
	var id *workload.Identity
	var err error
	if w.SPIFFEID != "" {
		id, err = workload.VerifySVID(raw, w, audience, env.Now())
	} else {
		id, err = workload.VerifyServiceAccount(ctx, env.Workloads, raw, w, audience, env.Now())
	}
	if err == nil {
		return id, nil
	}
	if errors.Is(err, workload.ErrUnavailable) {
		return nil, ErrInvalidClient.WithDescription(workload.ErrUnavailable.Error() + " (docs/workload-identity.md)").because("workload_unavailable")
	}
	ref, ok := workload.AsRefusal(err)
	if !ok {
		env.Log(ctx).Error(err, "cannot review a workload token")
		return nil, ErrTemporarilyUnavailable.WithDescription("the cluster could not be asked about the workload's token; try again")
	}
	env.Log(ctx).V(1).Info("workload token refused", "reason", ref.Reason, "detail", ref.Description)
	if ref.Public {
		return nil, assertionError(ref.Description).because("workload_" + ref.Reason)
	}
	return nil, failed("workload_" + ref.Reason)
}

// WorkloadActor verifies an actor_token (RFC 8693 §2.1) that is a workload's token, a
// ServiceAccount token or a JWT-SVID with this issuer as its audience, and returns the workload
// it proves: the one a workload_identity client of the Project declares whose identity the
// token's sub names. Token exchange names it in the issued token's act claim. An actor token
// of no declared workload is refused like any unverified one.
func WorkloadActor(ctx context.Context, env *site.Env, p *config.Project, raw string) (*workload.Identity, error) {
	sub, ok := workload.Subject(raw)
	if !ok {
		return nil, ErrInvalidRequest.WithDescription("actor_token is not a JWT")
	}
	for _, c := range p.Clients {
		w := c.Workload
		if w == nil || (w.SPIFFEID != sub && w.ServiceAccountSubject() != sub) {
			continue
		}
		id, err := VerifyWorkload(ctx, env, w, p.Issuer, raw)
		if err != nil {
			e := AsError(err)
			if e.Code == ErrInvalidClient.Code {
				// The actor is not the client here: a bad actor token is a bad grant.
				return nil, ErrInvalidGrant.WithDescription("actor_token: " + e.Description)
			}
			return nil, err
		}
		return id, nil
	}
	return nil, ErrInvalidGrant.WithDescription("actor_token names no workload of this Project's clients")
}

// workloadAssertion is the workload branch of authenticateAssertion; handled says whether the
// assertion was a workload's.
func workloadAssertion(ctx context.Context, env *site.Env, p *config.Project, form url.Values, typ, raw string) (c *site.Client, handled bool, err error) {
	c, handled, err = workloadClient(p, form, typ, raw)
	if !handled || err != nil {
		return c, handled, err
	}
	c, err = authenticateWorkload(ctx, env, p, c, raw)
	return c, true, err
}
