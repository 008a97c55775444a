package oauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// refreshToken rotates a refresh token (docs/recognised-apps.md, decision 0008). Every refresh returns a new pair and
// retires the old token, keeping the family. A retired token presented again means two
// parties hold the grant: every live token the client holds for that person in the project is
// ended, the copy included. Within the grace window the immediate predecessor may be sent
// again (a retry, a second tab) and gets the very response the first request got, so both end
// with the same live pair; an older generation never does.
//
//nolint:funlen // rotation, reuse detection and the grace-window replay are one decision about one token, read top to bottom
func refreshToken(ctx context.Context, st Store, req *TokenRequest) (*TokenResponse, error) {
	f, env, p, client := req.Form, req.Env, req.Project, req.Client
	presented := f.Get("refresh_token")
	if presented == "" {
		return nil, ErrInvalidRequest.WithDescription("refresh_token is required")
	}
	invalid := ErrInvalidGrant.WithDescription("the refresh token is invalid, expired or revoked")
	hash := secret.Hash(presented)
	// The token and the person it was issued for, in one read.
	old, person, found, err := st.TokenHolder(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, invalid
	}
	if err != nil {
		return nil, Internal(err)
	}
	// Another client's token is not this client's business: it must not rotate or end it.
	if old.Kind != store.RefreshToken || old.Project != p.Key || old.ClientID != client.ID || !old.Active(req.Now) {
		return nil, invalid
	}
	// A refresh token bound to a key (a public client's, RFC 9449 §5) is good only with a proof
	// signed by that key: whoever copied the token without the key gets nothing, and the
	// token stays the holder's.
	if old.JKT != "" && old.JKT != req.JKT {
		// Most likely a copied token: recorded (the family is not ended, so a client that lost
		// its proof by a bug can still refresh once it sends one).
		env.Record(ctx, store.AuditRecord{
			Project: p.Key, Actor: "client:" + client.ID, Action: events.RefreshRefused, Target: old.Subject, ClientID: client.ID,
			Reason: "dpop_key_mismatch", Details: map[string]string{"family_id": old.FamilyID, "proof": ProofState(req.JKT)},
		})
		return nil, BoundKeyError("refresh token")
	}
	if err := env.RedirectPolicy(p, client.RedirectURIs); err != nil {
		if _, rerr := st.RevokeFamily(ctx, old.FamilyID, req.Now); rerr != nil {
			return nil, Internal(rerr)
		}
		env.Record(ctx, store.AuditRecord{
			Project: p.Key, Actor: "client:" + client.ID, Action: events.RefreshRefused, Target: old.Subject, Reason: "only_recognised_apps",
			Details: map[string]string{"client_id": client.ID, "family_id": old.FamilyID, "reason": err.Error()},
		})
		return nil, ErrInvalidGrant.WithDescription(err.Error())
	}
	if old.Subject != "" {
		if err := personMayRefresh(ctx, st, req, old, person, found); err != nil {
			return nil, err
		}
	}
	if old.Subject != "" {
		if err := allowedByPolicy(ctx, req, person, old.Audience); err != nil {
			return nil, err
		}
	}
	scopes := old.Scopes
	if s := f.Get("scope"); s != "" {
		if scopes, err = grantScopes(s, old.Scopes); err != nil {
			return nil, err
		}
	}
	details, approved, err := NarrowDetails(p, f, old.AuthorizationDetails)
	if err != nil {
		return nil, err
	}
	tokens, resp, err := Mint(p, req.Now, Issue{
		Details:        details,
		RefreshDetails: approved,
		Client:         client,
		Subject:        old.Subject,
		Scopes:         scopes,
		Audience:       old.Audience,
		AuthTime:       old.AuthTime,
		FamilyID:       old.FamilyID,
		Generation:     old.Generation + 1,
		CodeHash:       old.CodeHash,
		Refresh:        true,
		RefreshScopes:  old.Scopes,
		JKT:            req.JKT,
	})
	if err != nil {
		return nil, Internal(err)
	}
	sealed, err := sealResponse(env, hash, &resp)
	if err != nil {
		return nil, Internal(err)
	}
	rot, err := st.RotateRefreshToken(ctx, store.RotateRequest{
		OldHash: hash, New: tokens, Sealed: sealed, Now: req.Now, Grace: p.Lifetimes.RefreshGrace,
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, invalid
	}
	if err != nil {
		return nil, Internal(err)
	}
	switch rot.Outcome {
	case store.OutcomeRotated:
		recordIssued(ctx, req, site.GrantRefreshToken, tokens)
		return &resp, nil
	case store.OutcomeGraceReplay:
		replay, err := openResponse(env, hash, rot.Replay)
		if err != nil {
			// Cannot replay (for example the key rotated away): safer to refuse than to fork.
			env.Log(ctx).Error(err, "cannot open the sealed refresh response", "project", p.Key)
			return nil, invalid
		}
		return replay, nil
	case store.OutcomeReuseDetected:
		env.Record(ctx, store.AuditRecord{
			Project: p.Key, Actor: "client:" + client.ID, Action: events.RefreshReuse, Target: rot.Old.Subject,
			Details: map[string]string{
				"client_id":  client.ID,
				"family_id":  rot.Old.FamilyID,
				"generation": strconv.Itoa(rot.Old.Generation),
				"revoked":    itoa(rot.Revoked),
			},
		})
		return nil, ErrInvalidGrant.WithDescription("the refresh token was already used; this grant has been ended")
	default:
		return nil, invalid
	}
}

// personMayRefresh decides whether the person a refresh token was issued for may still act:
// still admitted by the project's sign-in, and confirmed by their provider where it re-checks
// people (docs/leavers.md).
func personMayRefresh(ctx context.Context, st Store, req *TokenRequest, old store.Token, person store.Person, found bool) error {
	env, p, client := req.Env, req.Project, req.Client
	if found && person.Source == "password" && p.SignIn.PasswordsUnavailable {
		// Fail closed without ending anything: the person may well still be in the file, and
		// the grant works again once the Secret is fixed (docs/leavers.md).
		return ErrTemporarilyUnavailable.WithDescription("the project's password file is unavailable, so this person cannot be confirmed right now")
	}
	if !found || !site.PersonActive(p, person) {
		// The person was removed from the project's sign-in: the grant ends with them.
		if _, rerr := st.RevokeFamily(ctx, old.FamilyID, req.Now); rerr != nil {
			return Internal(rerr)
		}
		env.Record(ctx, store.AuditRecord{
			Project: p.Key, Actor: "client:" + client.ID, Action: events.RefreshRefused, Target: old.Subject, Reason: "person_removed",
			Details: map[string]string{"client_id": client.ID, "family_id": old.FamilyID},
		})
		return ErrInvalidGrant.WithDescription("the person can no longer sign in to this project")
	}
	if env.CheckPerson != nil {
		return checkPerson(ctx, st, req, person, old.FamilyID)
	}
	return nil
}

// checkPerson asks whether the person may still act before their refresh token is rotated
// (site.Env.CheckPerson, docs/leavers.md).
func checkPerson(ctx context.Context, st Store, req *TokenRequest, person store.Person, familyID string) error {
	err := req.Env.CheckPerson(ctx, req.Project, person, req.Now)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, site.ErrPersonEnded):
		// Every token of the person, this family included, has been revoked already.
		return ErrInvalidGrant.WithDescription(err.Error())
	case errors.Is(err, site.ErrPersonUnchecked):
		if _, rerr := st.RevokeFamily(ctx, familyID, req.Now); rerr != nil {
			return Internal(rerr)
		}
		return ErrInvalidGrant.WithDescription(err.Error())
	case errors.Is(err, site.ErrPersonUnconfirmed):
		// Nothing is ended: the token works again once the organisation answers.
		return ErrTemporarilyUnavailable.WithDescription(err.Error())
	default:
		return Internal(err)
	}
}

// The grace-window response is sealed under a purpose bound to the old token's hash, so a
// sealed response can only ever be replayed for the token it was made for.
func replayPurpose(oldHash []byte) string {
	return "oauth.refresh-replay:" + base64.RawURLEncoding.EncodeToString(oldHash)
}

// sealResponse encodes as: one byte key-id length, key id, sealed JSON.
func sealResponse(env *site.Env, oldHash []byte, resp *TokenResponse) ([]byte, error) {
	b, err := json.Marshal(resp) //nolint:gosec // G117: the response is sealed with the keyring below before it is stored
	if err != nil {
		return nil, err
	}
	kid, sealed := env.Keyring.Seal(replayPurpose(oldHash), b)
	if len(kid) > 255 {
		return nil, errors.New("key id too long")
	}
	out := make([]byte, 0, 1+len(kid)+len(sealed))
	out = append(out, byte(len(kid))) //nolint:gosec // G115: len(kid) <= 255, checked above
	out = append(out, kid...)
	return append(out, sealed...), nil
}

func openResponse(env *site.Env, oldHash []byte, blob []byte) (*TokenResponse, error) {
	if len(blob) < 1 || len(blob) < 1+int(blob[0]) {
		return nil, errors.New("sealed response is truncated")
	}
	kid := string(blob[1 : 1+int(blob[0])])
	b, err := env.Keyring.Open(replayPurpose(oldHash), kid, blob[1+int(blob[0]):])
	if err != nil {
		return nil, err
	}
	var resp TokenResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
