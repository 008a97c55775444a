package signin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// Re-checking a person at the project's OpenID provider (docs/leavers.md, decision 0032).
//
// A person disabled at their organisation can no longer sign in there, but the tokens their
// agents hold here were issued on the strength of an earlier sign-in. With
// spec.signIn.oidc.recheckInterval set, a refresh of a person's token first makes sure the
// provider confirmed the person within that interval, by refreshing the person's own token at
// the provider, which a provider refuses once the person is disabled or their sessions were
// revoked there.
const (
	// recheckTimeout bounds one question to the provider: a slow provider delays that person's
	// refresh by at most this long, and nobody else's.
	recheckTimeout = 5 * time.Second
	// recheckRetry is how long a started check leases the question (other callers and replicas
	// do not ask meanwhile) and how long to wait after a provider that did not answer before
	// asking again. Longer than recheckTimeout.
	recheckRetry = time.Minute
)

var (
	errNotDue = errors.New("re-check not due")
	errLeased = errors.New("re-check already started")
	// errInGrace: the provider could not confirm the person just now, but its last word is
	// less than twice the interval old. A refresh goes on; a passkey sign-in does not.
	errInGrace = errors.New("re-check unconfirmed within the grace period")
)

// recheckPurpose seals the provider's refresh token for one person of one project, so a sealed
// value copied onto another row does not open.
func recheckPurpose(p *config.Project, subject string) string {
	return "signin.recheck:" + p.Key + ":" + subject
}

// keepForRecheck keeps the provider's refresh token from a sign-in when the project re-checks
// people: the sign-in itself is the provider's latest word on the person.
func (h *handler) keepForRecheck(ctx context.Context, p *config.Project, person store.Person, tok *oauth2.Token, now time.Time) error {
	if p.SignIn.OIDC.RecheckInterval <= 0 {
		return nil
	}
	if tok.RefreshToken == "" {
		// Sign-in works; the person's agents will be asked to sign in again at their next
		// refresh, since there is nothing to re-check them with.
		h.env.Logger.Error(nil, "the OpenID provider issued no refresh token although offline_access was asked for; people cannot be re-checked",
			"project", p.Key, "issuer", p.SignIn.OIDC.Issuer)
		return nil
	}
	kid, sealed := h.env.Keyring.Seal(recheckPurpose(p, person.ID), []byte(tok.RefreshToken))
	return h.store.SavePersonCheck(ctx, store.PersonCheck{
		Project: p.Key, Subject: person.ID, KeyID: kid, RefreshToken: sealed, CheckedAt: now,
	})
}

// checkPerson is site.Env.CheckPerson. Concurrent refreshes for one person on this replica
// share one question to the provider (singleflight); on other replicas the stored lease keeps
// them from asking at the same time with the same refresh token, which a provider that rotates
// refresh tokens would take for reuse.
func (h *handler) checkPerson(ctx context.Context, p *config.Project, person store.Person, now time.Time) error {
	err := h.askProvider(ctx, p, person, now)
	if errors.Is(err, errInGrace) {
		return nil
	}
	return err
}

// confirmPerson is checkPerson for a passkey sign-in: a passkey is the person's own key, so the
// provider's word on them must be no older than the interval, with no grace for a provider
// that does not answer. A new session is not an agent that has been working for hours.
func (h *handler) confirmPerson(ctx context.Context, p *config.Project, person store.Person, now time.Time) error {
	err := h.askProvider(ctx, p, person, now)
	if errors.Is(err, errInGrace) {
		return site.ErrPersonUnconfirmed
	}
	return err
}

func (h *handler) askProvider(ctx context.Context, p *config.Project, person store.Person, now time.Time) error {
	o := p.SignIn.OIDC
	if o == nil || o.RecheckInterval <= 0 || person.Source != "oidc" {
		// People from the password file are checked against the file on every request.
		return nil
	}
	ch := h.recheck.DoChan(p.Key+"\x00"+person.ID, func() (any, error) {
		// Not tied to the first caller's request: the others wait for the same answer.
		return nil, h.recheckPerson(context.WithoutCancel(ctx), p, person, now)
	})
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *handler) recheckPerson(ctx context.Context, p *config.Project, person store.Person, now time.Time) error {
	o := p.SignIn.OIDC
	interval := o.RecheckInterval
	pc, err := h.store.UpdatePersonCheck(ctx, p.Key, person.ID, func(c store.PersonCheck) (store.PersonCheck, error) {
		if now.Sub(c.CheckedAt) < interval {
			return c, errNotDue
		}
		if c.TriedAt.After(c.CheckedAt) && now.Sub(c.TriedAt) < min(recheckRetry, interval) {
			return c, errLeased
		}
		c.TriedAt = now
		return c, nil
	})
	switch {
	case errors.Is(err, errNotDue):
		return nil
	case errors.Is(err, errLeased):
		return h.unconfirmed(ctx, p, person, pc, now, "")
	case errors.Is(err, store.ErrNotFound):
		h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: "system", Action: events.RecheckFailed, Target: person.ID,
			Details: map[string]string{"issuer": o.Issuer, "reason": "no_provider_token"}})
		return site.ErrPersonUnchecked
	case err != nil:
		return err
	}

	rt, err := h.env.Keyring.Open(recheckPurpose(p, person.ID), pc.KeyID, pc.RefreshToken)
	if err != nil {
		// The sealing key was retired: like never having had a token.
		h.env.Logger.Info("cannot open the provider's refresh token for a re-check", "project", p.Key, "subject", person.ID, "error", err.Error())
		h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: "system", Action: events.RecheckFailed, Target: person.ID,
			Details: map[string]string{"issuer": o.Issuer, "reason": "no_provider_token"}})
		return site.ErrPersonUnchecked
	}
	prov, err := h.providers.get(o.Issuer, now) //nolint:contextcheck // discovery is cached for every request, not tied to this one
	if err != nil {
		return h.unconfirmed(ctx, p, person, pc, now, "discovery failed")
	}
	cctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, h.providers.client), recheckTimeout)
	defer cancel()
	cfg := h.oauth2Config(p, prov)
	tok, err := cfg.TokenSource(cctx, &oauth2.Token{RefreshToken: string(rt)}).Token()
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
		// The provider no longer honours the person's grant: disabled, deleted, or their
		// sessions revoked there. Other error codes (invalid_client: our own registration is
		// wrong) say nothing about the person.
		return h.endPerson(ctx, p, person, now, "invalid_grant")
	}
	var notAdmitted string
	if err == nil {
		notAdmitted, err = h.sameSubject(cctx, p, prov, person, tok)
	}
	if err == nil && notAdmitted != "" {
		// The provider's fresh ID token says the person left the allowed domains or groups
		// (decision 0063).
		return h.endPerson(ctx, p, person, now, notAdmitted)
	}
	if err != nil {
		reason := err.Error()
		if re != nil {
			reason = "token endpoint answered " + re.ErrorCode // never the body
		}
		h.env.Logger.Info("re-check at the provider failed", "project", p.Key, "subject", person.ID, "reason", reason)
		return h.unconfirmed(ctx, p, person, pc, now, "the provider did not answer")
	}
	// Confirmed. Keep the provider's new refresh token if it rotated it, unless a sign-in
	// stored a newer one meanwhile.
	_, err = h.store.UpdatePersonCheck(ctx, p.Key, person.ID, func(c store.PersonCheck) (store.PersonCheck, error) {
		if !bytes.Equal(c.RefreshToken, pc.RefreshToken) {
			return c, nil
		}
		if tok.RefreshToken != "" && tok.RefreshToken != string(rt) {
			c.KeyID, c.RefreshToken = h.env.Keyring.Seal(recheckPurpose(p, person.ID), []byte(tok.RefreshToken))
		}
		c.CheckedAt = now
		return c, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		// Ended meanwhile (a back-channel logout): the refresh must not go on.
		return site.ErrPersonEnded
	}
	return err
}

// endPerson ends all of a person's sessions, tokens and passkeys after the provider's answer to a
// re-check refused them, and records why.
func (h *handler) endPerson(ctx context.Context, p *config.Project, person store.Person, now time.Time, reason string) error {
	ended, err := h.store.EndSignIns(ctx, p.Key, person.ID, now)
	if err != nil {
		return err
	}
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: "system", Action: events.RecheckFailed, Target: person.ID,
		Details: map[string]string{"issuer": p.SignIn.OIDC.Issuer, "reason": reason,
			"sessions": strconv.FormatInt(ended.Sessions, 10), "tokens": strconv.FormatInt(ended.Tokens, 10),
			"passkeys": strconv.FormatInt(ended.Passkeys, 10)}})
	return site.ErrPersonEnded
}

// sameSubject checks an ID token the provider returned with the refreshed tokens: OpenID
// Connect Core §12.2 requires the same sub, and one for anyone else is a provider fault. When
// the token is there, the project's allowedEmailDomains and allowedGroups are applied to it
// and notAdmitted is the reason it fails them. Without an ID token in the answer, or without
// the claim a rule reads, the sign-in's claims stand (docs/leavers.md).
func (h *handler) sameSubject(ctx context.Context, p *config.Project, prov *provider, person store.Person, tok *oauth2.Token) (notAdmitted string, err error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", nil
	}
	idt, err := prov.Verifier(&oidc.Config{ClientID: p.SignIn.OIDC.ClientID, Now: h.env.Now}).Verify(ctx, raw)
	if err != nil {
		return "", err
	}
	if idt.Issuer+"|"+idt.Subject != person.SourceSubject {
		return "", errors.New("refreshed ID token names another person")
	}
	var all map[string]json.RawMessage
	if err := idt.Claims(&all); err != nil {
		return "", err
	}
	// A refreshed ID token may leave claims out (OpenID Connect Core §12.2 requires only iss,
	// sub and aud to match): a rule is applied only when the claim it reads is in the token,
	// so silence is not taken for a departure.
	o := *p.SignIn.OIDC
	if _, ok := all["email"]; !ok {
		o.AllowedEmailDomains = nil
	}
	if _, ok := all[o.GroupsClaim]; !ok {
		o.AllowedGroups = nil
	}
	_, reason := admitted(&o, all)
	return reason, nil
}

// unconfirmed decides a refresh the provider could not confirm: it goes on while the
// provider's last word is less than twice the interval old (a provider restarting must not
// stop every agent), and waits for the provider after that. Nothing is ended either way. why
// is "" when this caller did not ask (another check holds the lease, or the provider failed
// less than recheckRetry ago); only answers that were asked for, or a refusal, are recorded.
func (h *handler) unconfirmed(ctx context.Context, p *config.Project, person store.Person, pc store.PersonCheck, now time.Time, why string) error {
	open := now.Sub(pc.CheckedAt) < 2*p.SignIn.OIDC.RecheckInterval
	outcome := "allowed"
	if !open {
		outcome = "refused"
	}
	if why == "" && open {
		return errInGrace
	}
	if why == "" {
		why = "the provider did not answer recently"
	}
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: "system", Action: events.RecheckUnavailable, Target: person.ID,
		Details: map[string]string{"issuer": p.SignIn.OIDC.Issuer, "reason": why, "refresh": outcome,
			"last_confirmed": pc.CheckedAt.UTC().Format(time.RFC3339)}})
	if open {
		return errInGrace
	}
	return site.ErrPersonUnconfirmed
}
