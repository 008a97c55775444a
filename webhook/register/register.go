// Package register is dynamic client registration (RFC 7591) under the project's
// registration policy, and client management with the registration access token (RFC 7592).
package register

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// MaxBodyBytes bounds a registration document; real ones are well under a kilobyte.
const MaxBodyBytes = 64 << 10

// Registration limits per client address (token buckets, per replica, across projects): an
// agent registers once, so AddressBurst registrations, then one more every AddressEvery, is
// plenty even for everyone behind an ingress that is not configured as a trusted proxy (they
// then share its address), and slows down anyone filling the store with clients. Only
// registrations that create a client count (a refused one is refunded: it stored nothing).
// Over the limit the answer is 429 with Retry-After.
var (
	AddressBurst = 100
	AddressEvery = 5 * time.Second
)

type registrar struct {
	env   *site.Env
	store Store
	limit *ratelimit.Limiter
}

// Register mounts /register and /register/{client_id}.
func Register(rt site.Router, env *site.Env, st Store) {
	h := &registrar{env: env, store: st, limit: ratelimit.New(AddressBurst, AddressEvery).Share(env.RateBuckets, "register.address")}
	rt.API("/register", http.HandlerFunc(h.register))
	rt.API("/register/{client_id}", http.HandlerFunc(h.manage))
}

// response is a client information response (RFC 7591 §3.2.1, RFC 7592 §3).
type response struct {
	ClientID                string `json:"client_id"`
	ClientSecret            string `json:"client_secret,omitempty"`
	ClientIDIssuedAt        int64  `json:"client_id_issued_at"`
	ClientSecretExpiresAt   *int64 `json:"client_secret_expires_at,omitempty"`
	RegistrationAccessToken string `json:"registration_access_token,omitempty"`
	RegistrationClientURI   string `json:"registration_client_uri"`
	Metadata
}

var invalidToken = oauth.ErrInvalidToken.WithDescription("the access token is missing or invalid")

func (h *registrar) register(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		oauth.WriteError(w, oauth.ErrMethodNotAllowed.WithDescription("use POST"))
		return
	}
	addr := h.env.ClientAddress(r)
	if ok, wait := h.limit.Take(r.Context(), addr, h.env.Now()); !ok {
		secs := ratelimit.Seconds(wait)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		oauth.WriteError(w, oauth.ErrTemporarilyUnavailable.WithStatus(http.StatusTooManyRequests).
			WithDescription("too many registrations from this address; try again in "+strconv.Itoa(secs)+" s"))
		return
	}
	created := false
	defer func(ctx context.Context) {
		if !created {
			h.limit.Refund(ctx, addr, h.env.Now())
		}
	}(r.Context())
	switch p.Registration.Mode {
	case config.RegistrationOpen:
	case config.RegistrationInitialAccessToken:
		if !initialTokenOK(p, oauth.BearerToken(r)) {
			oauth.WriteError(w, invalidToken)
			return
		}
	default:
		oauth.WriteError(w, oauth.ErrRegistrationNotAllowed)
		return
	}
	var m Metadata
	if err := readJSON(w, r, &m); err != nil {
		oauth.WriteError(w, err)
		return
	}
	if err := h.check(p, &m); err != nil {
		oauth.WriteError(w, err)
		return
	}
	now := h.env.Now()
	c := store.Client{
		Project:   p.Key,
		ID:        secret.NewID(),
		CreatedAt: now,
		UpdatedAt: now,
	}
	var clientSecret string
	if m.TokenEndpointAuthMethod != site.AuthNone {
		clientSecret = secret.New(secret.PrefixClientSecret)
		c.SecretHash = secret.Hash(clientSecret)
	}
	regToken := secret.New(secret.PrefixRegToken)
	c.RegistrationTokenHash = secret.Hash(regToken)
	if err := apply(&c, m); err != nil {
		h.internal(w, p, err)
		return
	}
	if err := h.store.CreateClient(r.Context(), c); err != nil {
		h.internal(w, p, err)
		return
	}
	created = true
	h.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Actor: "client:" + c.ID, Action: events.ClientRegistered, Target: c.ID,
		Details: map[string]string{"client_name": m.ClientName},
	})
	resp := h.info(p, c, m)
	resp.ClientSecret = clientSecret
	resp.RegistrationAccessToken = regToken
	oauth.WriteJSON(w, http.StatusCreated, resp)
}

// check validates metadata and asks the project's redirect policy about every redirect URI,
// so a client that could never connect learns so at once.
func (h *registrar) check(p *config.Project, m *Metadata) error {
	if err := m.Normalize(); err != nil {
		return err
	}
	if err := h.env.RedirectPolicy(p, m.RedirectURIs); err != nil {
		return oauth.ErrInvalidRedirectURI.WithDescription(err.Error())
	}
	return nil
}

func (h *registrar) manage(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	switch r.Method {
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		oauth.WriteError(w, oauth.ErrMethodNotAllowed.WithDescription("use GET, PUT or DELETE"))
		return
	}
	id := r.PathValue("client_id")
	ctx := r.Context()
	c, err := h.store.GetClient(ctx, p.Key, id)
	if errors.Is(err, store.ErrNotFound) {
		oauth.WriteError(w, invalidToken)
		return
	}
	if err != nil {
		h.internal(w, p, err)
		return
	}
	if !secret.HashEqual(oauth.BearerToken(r), c.RegistrationTokenHash) {
		oauth.WriteError(w, invalidToken)
		return
	}
	switch r.Method {
	case http.MethodGet:
		oauth.WriteJSON(w, http.StatusOK, h.info(p, c, stored(c)))
	case http.MethodDelete:
		if err := h.store.DeleteClient(ctx, p.Key, id, h.env.Now()); err != nil && !errors.Is(err, store.ErrNotFound) {
			h.internal(w, p, err)
			return
		}
		h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: "client:" + id, Action: events.ClientDeleted, Target: id})
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	case http.MethodPut:
		h.update(w, r, p, c)
	}
}

// update replaces the client's metadata (RFC 7592 §2.2). Switching between a public and a
// confidential client is not an update: register a new client instead.
func (h *registrar) update(w http.ResponseWriter, r *http.Request, p *config.Project, c store.Client) {
	var body struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		Metadata
	}
	if err := readJSON(w, r, &body); err != nil {
		oauth.WriteError(w, err)
		return
	}
	if body.ClientID != c.ID {
		oauth.WriteError(w, oauth.ErrInvalidClientMetadata.WithDescription("client_id must match the client being updated"))
		return
	}
	if body.ClientSecret != "" && !secret.HashEqual(body.ClientSecret, c.SecretHash) {
		oauth.WriteError(w, oauth.ErrInvalidClientMetadata.WithDescription("client_secret does not match"))
		return
	}
	m := body.Metadata
	if err := h.check(p, &m); err != nil {
		oauth.WriteError(w, err)
		return
	}
	if (m.TokenEndpointAuthMethod == site.AuthNone) != (c.TokenEndpointAuthMethod == site.AuthNone) {
		oauth.WriteError(w, oauth.ErrInvalidClientMetadata.WithDescription("token_endpoint_auth_method cannot change between none and a secret"))
		return
	}
	now := h.env.Now()
	updated, err := h.store.UpdateClient(r.Context(), p.Key, c.ID, func(old store.Client) (store.Client, error) {
		old.UpdatedAt = now
		err := apply(&old, m)
		return old, err
	})
	if errors.Is(err, store.ErrNotFound) {
		oauth.WriteError(w, invalidToken)
		return
	}
	if err != nil {
		h.internal(w, p, err)
		return
	}
	h.env.Record(r.Context(), store.AuditRecord{Project: p.Key, Actor: "client:" + c.ID, Action: events.ClientUpdated, Target: c.ID})
	oauth.WriteJSON(w, http.StatusOK, h.info(p, updated, m))
}

func (h *registrar) info(p *config.Project, c store.Client, m Metadata) response {
	resp := response{
		ClientID:              c.ID,
		ClientIDIssuedAt:      c.CreatedAt.Unix(),
		RegistrationClientURI: p.Issuer + "/register/" + c.ID,
		Metadata:              m,
	}
	if len(c.SecretHash) > 0 {
		var never int64
		resp.ClientSecretExpiresAt = &never
	}
	return resp
}

func (h *registrar) internal(w http.ResponseWriter, p *config.Project, err error) {
	h.env.ResponseLog(w).Error(err, "client registration failed", "project", p.Key)
	oauth.WriteError(w, oauth.Internal(err))
}

// apply copies validated metadata onto a stored client.
func apply(c *store.Client, m Metadata) error {
	doc, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.Name = m.ClientName
	c.URI = m.ClientURI
	c.LogoURI = m.LogoURI
	c.RedirectURIs = m.RedirectURIs
	c.GrantTypes = m.GrantTypes
	c.ResponseTypes = m.ResponseTypes
	c.TokenEndpointAuthMethod = m.TokenEndpointAuthMethod
	c.Scope = m.Scope
	c.Metadata = doc
	return nil
}

// stored reads a client's metadata back, falling back to its columns.
func stored(c store.Client) Metadata {
	var m Metadata
	if len(c.Metadata) > 0 && json.Unmarshal(c.Metadata, &m) == nil {
		return m
	}
	return Metadata{
		RedirectURIs: c.RedirectURIs, TokenEndpointAuthMethod: c.TokenEndpointAuthMethod,
		GrantTypes: c.GrantTypes, ResponseTypes: c.ResponseTypes, ClientName: c.Name,
		ClientURI: c.URI, LogoURI: c.LogoURI, Scope: c.Scope,
	}
}

// initialTokenOK compares a presented initial access token with every accepted hash, without
// stopping early, so timing does not say which one matched.
func initialTokenOK(p *config.Project, tok string) bool {
	if tok == "" {
		return false
	}
	h := secret.Hash(tok)
	ok := 0
	for _, want := range p.Registration.InitialAccessTokenHashes {
		if len(want) == len(h) {
			ok |= subtle.ConstantTimeCompare(h, want)
		}
	}
	return ok == 1
}

// readJSON reads a JSON object body of bounded size. Unknown members are ignored (RFC 7591
// §2); a body that is not a JSON object, or has members of the wrong type, is
// invalid_client_metadata.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/json" {
		return oauth.ErrInvalidClientMetadata.WithDescription("the body must be application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return oauth.ErrRequestTooLarge
		}
		return oauth.ErrInvalidRequest.WithDescription("cannot read the request body")
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return oauth.ErrInvalidClientMetadata.WithDescription("the body must be a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return oauth.ErrInvalidClientMetadata.WithDescription(quote(typeErr.Field) + " has the wrong type")
		}
		return oauth.ErrInvalidClientMetadata.WithDescription("the body is not valid JSON")
	}
	return nil
}
