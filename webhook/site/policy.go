package site

import (
	"context"
	"errors"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/redirect"
)

// ErrOnlyRecognisedApps is the refusal of "Only recognised apps can connect"
// (docs/recognised-apps.md). Its text is shown as is: on the consent page, as error_description at
// the token endpoint and in dynamic registration.
var ErrOnlyRecognisedApps = errors.New("This organisation only allows recognised apps to connect") //nolint:staticcheck // a sentence shown to people as is

// PolicyRefusal is ErrOnlyRecognisedApps with the redirect URIs that caused it, for audit
// records and the consent page.
type PolicyRefusal struct {
	// Refused are the registered redirect URIs the project does not recognise.
	Refused []string
}

func (e *PolicyRefusal) Error() string        { return ErrOnlyRecognisedApps.Error() }
func (e *PolicyRefusal) Is(target error) bool { return target == ErrOnlyRecognisedApps }

// RedirectPolicy is the project's redirect policy: with OnlyRecognisedApps on, a client any of
// whose registered redirect URIs is neither a recognised agent callback nor on the person's
// device is refused (a *PolicyRefusal). Every registered redirect counts, not only the one in
// use, because a token does not remember which redirect its code went to.
func RedirectPolicy(p *config.Project, redirectURIs []string) error {
	if !p.Redirects.OnlyRecognisedApps {
		return nil
	}
	if refused := redirect.Allowed(redirectURIs, p.Redirects); len(refused) > 0 {
		return &PolicyRefusal{Refused: refused}
	}
	return nil
}

// ClientRefused applies the redirect policy, at the moment a token is used, to the client the
// token was issued to. refused is the policy's error when the client is refused, or when it
// cannot be found while the policy is on (a deleted client, a metadata document that no longer
// qualifies): under "only recognised apps", what cannot be recognised is refused. err is a
// failure to look the client up (the store), for a server_error. Enforcement is thereby
// immediate on every replica, before the RedirectPolicy controller has revoked anything.
//
// The policy can refuse only while the project's OnlyRecognisedApps is on; otherwise this
// costs nothing (no client lookup, no database read).
func (e *Env) ClientRefused(ctx context.Context, p *config.Project, clientID string) (refused, err error) {
	if !p.Redirects.OnlyRecognisedApps {
		return nil, nil
	}
	c, err := e.Client(ctx, p, clientID)
	if errors.Is(err, ErrUnknownClient) {
		return ErrOnlyRecognisedApps, nil
	}
	if err != nil {
		return nil, err
	}
	return e.RedirectPolicy(p, c.RedirectURIs), nil
}
