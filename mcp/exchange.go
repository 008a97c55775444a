package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RFC 8693 identifiers the exchange sends.
const (
	GrantTypeTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccessToken   = "urn:ietf:params:oauth:token-type:access_token"
)

// Reasons Latchkey gives when it refuses a token exchange with a connect link.
const (
	// ReasonConnectRequired: the person has not connected the service.
	ReasonConnectRequired = "connect_required"
	// ReasonAllowRequired: the person connected the service but has not let this agent use it.
	ReasonAllowRequired = "allow_required"
	// ReasonReconnectRequired: the connection stopped working (the service revoked it, or its
	// refresh failed) and the person must connect again.
	ReasonReconnectRequired = "reconnect_required"
)

// maxResponseBytes bounds what is read from Latchkey; real answers are a few hundred bytes.
const maxResponseBytes = 1 << 20

// Exchanger asks Latchkey's token endpoint, by RFC 8693 token exchange, for the person's token
// at a connected service. It authenticates as the MCP server's own OAuth client
// (client_secret_basic).
type Exchanger struct {
	// TokenURL is the project's token endpoint, {issuer}/token.
	TokenURL string
	// ClientID and ClientSecret are the MCP server's client credentials at Latchkey.
	ClientID     string
	ClientSecret string
	// HTTP is the client used to reach Latchkey; nil means http.DefaultClient.
	HTTP *http.Client
	// Wait pauses between polls in WaitForApproval; nil means a timer that ends early when
	// ctx does.
	Wait func(ctx context.Context, d time.Duration) error
}

// Token is the person's access token at the connected service.
type Token struct {
	// AccessToken is the upstream service's token; send it only to that service.
	AccessToken string
	// TokenType is how to present it, usually "Bearer".
	TokenType string
	// IssuedTokenType is the RFC 8693 type of AccessToken.
	IssuedTokenType string
	// Scope is what the upstream service granted, space separated, when Latchkey says.
	Scope string
	// Expiry is when AccessToken stops working; zero when Latchkey did not say.
	Expiry time.Time
}

// ConnectRequired is Latchkey's refusal that carries a connect link made for the person: show
// Message and URI to the person, then try again. Only that person, freshly signed in, can use
// the link, so passing it on unchanged is safe.
type ConnectRequired struct {
	// Reason is ReasonConnectRequired, ReasonAllowRequired or ReasonReconnectRequired.
	Reason string
	// URI is the connect link (connect_uri). It carries no credential.
	URI string
	// ID identifies the link (connect_id); it stays the same while the link is open.
	ID string
	// ExpiresIn is how long the link stays open (connect_expires_in).
	ExpiresIn time.Duration
	// Message is the sentence to show the person (connect_message), naming the service and agent.
	Message string
	// Description is Latchkey's error_description, for logs.
	Description string
	// Audience is the connected service the exchange asked for.
	Audience string

	// declined is set by Relay.Token when the person already turned this link down once, so the
	// relay answers with a plain message instead of asking again.
	declined bool
}

func (e *ConnectRequired) Error() string {
	return e.message() + " " + e.URI
}

// message is Message, or a sentence built from Reason when Latchkey sent none.
func (e *ConnectRequired) message() string {
	if m := strings.TrimSpace(e.Message); m != "" {
		return m
	}
	switch e.Reason {
	case ReasonAllowRequired:
		return "Open this link to let this agent use your connected account."
	case ReasonReconnectRequired:
		return "Open this link to reconnect your account; the connection stopped working."
	default:
		return "Open this link to connect your account."
	}
}

// OAuthError is any other error answer from the token endpoint (RFC 6749 §5.2, RFC 8693 §2.2.2),
// for example invalid_target for an audience that names no connector.
type OAuthError struct {
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Code is the OAuth "error" value.
	Code string
	// Description is error_description, meant for the developer.
	Description string
	// URI is error_uri, when given.
	URI string
	// Audience is the connected service the exchange asked for.
	Audience string
}

func (e *OAuthError) Error() string {
	s := "latchkey: token exchange refused: " + e.Code
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

// Exchange trades the person's Latchkey access token (subjectToken: the token the MCP client
// presented to this server) for their token at the connected service that audience names.
//
// It returns a *ConnectRequired when Latchkey answers with a connect link, an *OAuthError for
// any other OAuth error, and a plain error when Latchkey cannot be reached or answers out of
// protocol.
func (e *Exchanger) Exchange(ctx context.Context, subjectToken, audience string) (*Token, error) {
	return e.ExchangeDetails(ctx, subjectToken, audience, "")
}

// ExchangeDetails is Exchange asking for RFC 9396 authorization_details (a JSON array; none
// when ""). When the subject token does not carry them and the MCP server's client may start
// approvals, the refusal is an *ApprovalRequired: WaitForApproval, then exchange again with
// the token it returns.
func (e *Exchanger) ExchangeDetails(ctx context.Context, subjectToken, audience, authorizationDetails string) (*Token, error) {
	if e == nil || e.TokenURL == "" {
		return nil, errors.New("latchkey: Exchanger.TokenURL is not set")
	}
	if subjectToken == "" {
		return nil, errors.New("latchkey: no subject token to exchange")
	}
	if audience == "" {
		return nil, errors.New("latchkey: no audience to exchange for")
	}
	form := url.Values{
		"grant_type":           {GrantTypeTokenExchange},
		"subject_token":        {subjectToken},
		"subject_token_type":   {TokenTypeAccessToken},
		"requested_token_type": {TokenTypeAccessToken},
		"audience":             {audience},
	}
	if authorizationDetails != "" {
		form.Set("authorization_details", authorizationDetails)
	}
	status, body, err := postForm(ctx, e.HTTP, e.TokenURL, e.ClientID, e.ClientSecret, form)
	if err != nil {
		return nil, fmt.Errorf("latchkey: token exchange: %w", err)
	}
	if status == http.StatusOK {
		return parseToken(body)
	}
	return nil, parseRefusal(status, body, audience)
}

// postForm sends an authenticated form POST and returns the answer's status and JSON body.
func postForm(ctx context.Context, hc *http.Client, endpoint, clientID, secret string, form url.Values) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 §2.3.1: both halves are form-encoded before Basic encoding.
	req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return 0, nil, err
	}
	if len(body) > maxResponseBytes {
		return 0, nil, fmt.Errorf("%s answered with more than %d bytes", endpoint, maxResponseBytes)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return resp.StatusCode, nil, fmt.Errorf("%s answered %d with content type %q, want application/json", endpoint, resp.StatusCode, mt)
	}
	return resp.StatusCode, body, nil
}

func parseToken(body []byte) (*Token, error) {
	var tr struct {
		AccessToken     string      `json:"access_token"`
		TokenType       string      `json:"token_type"`
		IssuedTokenType string      `json:"issued_token_type"`
		ExpiresIn       json.Number `json:"expires_in"`
		Scope           string      `json:"scope"`
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, fmt.Errorf("latchkey: token exchange answer: %w", err)
	}
	if tr.AccessToken == "" {
		return nil, errors.New("latchkey: token exchange answer has no access_token")
	}
	t := &Token{
		AccessToken:     tr.AccessToken,
		TokenType:       tr.TokenType,
		IssuedTokenType: tr.IssuedTokenType,
		Scope:           tr.Scope,
	}
	if tr.ExpiresIn != "" {
		secs, err := tr.ExpiresIn.Int64()
		if err != nil || secs < 0 {
			return nil, fmt.Errorf("latchkey: token exchange answer has a bad expires_in %q", tr.ExpiresIn)
		}
		if secs > 0 {
			t.Expiry = time.Now().Add(time.Duration(secs) * time.Second)
		}
	}
	return t, nil
}

func parseRefusal(status int, body []byte, audience string) error {
	var er struct {
		Error            string      `json:"error"`
		ErrorDescription string      `json:"error_description"`
		ErrorURI         string      `json:"error_uri"`
		Reason           string      `json:"reason"`
		ConnectURI       string      `json:"connect_uri"`
		ConnectID        string      `json:"connect_id"`
		ConnectExpiresIn json.Number `json:"connect_expires_in"`
		ConnectMessage   string      `json:"connect_message"`
	}
	if err := json.Unmarshal(body, &er); err != nil || er.Error == "" {
		return fmt.Errorf("latchkey: token endpoint answered %d without an OAuth error", status)
	}
	if er.Error == CodeApprovalRequired {
		return parseApproval(status, body, er.ErrorDescription, audience)
	}
	oe := &OAuthError{StatusCode: status, Code: er.Error, Description: er.ErrorDescription, URI: er.ErrorURI, Audience: audience}
	if er.Error != "invalid_grant" {
		return oe
	}
	switch er.Reason {
	case ReasonConnectRequired, ReasonAllowRequired, ReasonReconnectRequired:
	default:
		return oe
	}
	if err := checkLink(er.ConnectURI); err != nil {
		// A refusal whose link cannot be shown safely is reported as what it is, never relayed.
		oe.Description = fmt.Sprintf("%s (connect link refused: %v)", oe.Description, err)
		return oe
	}
	if er.ConnectID == "" {
		oe.Description += " (connect link refused: no connect_id)"
		return oe
	}
	var expires time.Duration
	if er.ConnectExpiresIn != "" {
		secs, err := er.ConnectExpiresIn.Int64()
		if err != nil || secs < 0 {
			oe.Description += " (connect link refused: bad connect_expires_in)"
			return oe
		}
		expires = time.Duration(secs) * time.Second
	}
	return &ConnectRequired{
		Reason:      er.Reason,
		URI:         er.ConnectURI,
		ID:          er.ConnectID,
		ExpiresIn:   expires,
		Message:     er.ConnectMessage,
		Description: er.ErrorDescription,
		Audience:    audience,
	}
}

// checkLink accepts only what a client may safely show and open: an absolute http(s) URL with a
// host and no credentials (the MCP specification forbids credentials in an elicitation URL).
func checkLink(raw string) error {
	if raw == "" {
		return errors.New("no connect_uri")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("connect_uri is not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("connect_uri scheme %q is not http(s)", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("connect_uri has no host")
	}
	if u.User != nil {
		return errors.New("connect_uri carries credentials")
	}
	return nil
}
