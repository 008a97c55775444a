package mcp

import (
	"context"
	"crypto/cipher"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP protocol versions the relay tells apart.
const (
	// ProtocolURLElicitationError is the first version with URL elicitation; a refusal travels as
	// the JSON-RPC error -32042 (URLElicitationRequiredError).
	ProtocolURLElicitationError = "2025-11-25"
	// ProtocolInputRequired is the first version with multi round-trip requests; a refusal
	// travels as an input_required result and the client retries with requestState.
	ProtocolInputRequired = "2026-07-28"
)

// InputKey is the key of the connect link in an input_required result's inputRequests, and of
// the client's answer in the retry's inputResponses.
const InputKey = "latchkey_connect"

// DefaultStateTTL is how long a requestState stays valid unless Relay.StateTTL says otherwise:
// long enough to sign in and connect a service, short enough that a copied state is soon
// worthless. The connect link itself stays open longer (30 minutes); an expired state only
// means the client calls the tool afresh and gets the same link again.
const DefaultStateTTL = 10 * time.Minute

// Caller is who is calling a tool, as Latchkey authenticated them.
type Caller struct {
	// Token is the Latchkey access token the MCP client presented; it is the subject_token of
	// the exchange.
	Token string
	// Subject is the person the token was issued for (introspection "sub").
	Subject string
	// ClientID is the agent the token was issued to (introspection "client_id").
	ClientID string
}

// Relay gets a person's token at a connected service for a tool call and, when Latchkey refuses
// with a connect link, answers the call the way the client's protocol version shows it to the
// person:
//
//   - 2026-07-28 and later, client declared elicitation.url: an input_required result holding
//     one elicitation/create request in URL mode, with a sealed requestState. The client shows
//     the link and retries; the retry gets the tool's result once the person has connected.
//   - 2025-11-25, client declared elicitation.url: the JSON-RPC error -32042 with
//     data.elicitations[0] = {mode:"url", elicitationId: connect_id, url, message}. The client
//     shows the link and calls the tool again.
//   - any other client: a tool error result (isError) whose text carries the message and the
//     link, so the agent can pass it on in chat.
//
// A Relay is safe for concurrent use once built; set its optional fields before serving.
type Relay struct {
	// Exchanger reaches Latchkey's token endpoint.
	Exchanger *Exchanger
	// StateTTL is how long a requestState is accepted; zero means DefaultStateTTL.
	StateTTL time.Duration
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// Caller finds who is calling. nil means CallerFromRequest: the token info that
	// ResourceServer.Verify put on the request (via auth.RequireBearerToken and the streamable
	// HTTP transport). Set it for other transports, for example stdio with a token from the
	// environment.
	Caller func(ctx context.Context, req *sdk.CallToolRequest) (Caller, error)

	aead cipher.AEAD
}

// NewRelay returns a relay that exchanges tokens with ex and seals requestState with stateKey,
// 32 random bytes (AES-256-GCM). Every replica of the MCP server must use the same key, since a
// retry may reach any of them; keep it secret, as anyone holding it can forge states.
func NewRelay(ex *Exchanger, stateKey []byte) (*Relay, error) {
	if ex == nil {
		return nil, errors.New("latchkey: NewRelay needs an Exchanger")
	}
	aead, err := newStateAEAD(stateKey)
	if err != nil {
		return nil, err
	}
	return &Relay{Exchanger: ex, aead: aead}, nil
}

var errNotBuilt = errors.New("latchkey: a Relay must be built with NewRelay")

// ErrNoCaller: the tool call carries no authenticated caller, so there is no token to exchange.
var ErrNoCaller = errors.New("latchkey: the tool call has no authenticated caller")

// CallerFromRequest reads the caller from the token info on the request, as put there by
// ResourceServer.Verify. It reports false when the request carries none (for example a
// transport without HTTP authentication).
func CallerFromRequest(req *sdk.CallToolRequest) (Caller, bool) {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return Caller{}, false
	}
	ti := req.Extra.TokenInfo
	token, _ := ti.Extra[TokenInfoToken].(string)
	client, _ := ti.Extra[TokenInfoClientID].(string)
	if token == "" || ti.UserID == "" {
		return Caller{}, false
	}
	return Caller{Token: token, Subject: ti.UserID, ClientID: client}, true
}

func (r *Relay) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Relay) caller(ctx context.Context, req *sdk.CallToolRequest) (Caller, error) {
	if r.Caller != nil {
		c, err := r.Caller(ctx, req)
		if err == nil && (c.Token == "" || c.Subject == "") {
			err = ErrNoCaller
		}
		return c, err
	}
	c, ok := CallerFromRequest(req)
	if !ok {
		return Caller{}, ErrNoCaller
	}
	return c, nil
}

// Token returns the caller's token at the connected service audience names (the Connector's
// audience in the Latchkey project).
//
// On a retry that carries a requestState, the state is verified first: a state that is not
// authentic, was issued to another person or for another request, or has expired is refused
// with ErrStateInvalid, ErrStateOtherPerson, ErrStateOtherRequest or ErrStateExpired. The
// exchange is then asked again: that is how the client learns the outcome of the link.
//
// Any error is meant for Result, which turns it into the answer to the tool call.
func (r *Relay) Token(ctx context.Context, req *sdk.CallToolRequest, audience string) (*Token, error) {
	if req == nil || req.Params == nil {
		return nil, errors.New("latchkey: no tool call")
	}
	if r.aead == nil {
		return nil, errNotBuilt
	}
	caller, err := r.caller(ctx, req)
	if err != nil {
		return nil, err
	}
	var state *requestState
	if raw := req.Params.RequestState; raw != "" {
		state, err = openState(r.aead, raw, caller, requestDigest(req.Params), r.now())
		if err != nil {
			return nil, err
		}
	}
	tok, err := r.Exchanger.Exchange(ctx, caller.Token, audience)
	var cr *ConnectRequired
	if errors.As(err, &cr) && state != nil && state.Audience == audience && declined(req.Params.InputResponses) {
		c := *cr
		c.declined = true
		return nil, &c
	}
	return tok, err
}

// declined reports whether the person turned down the connect link when the client showed it.
func declined(responses sdk.InputResponseMap) bool {
	er, ok := responses[InputKey].(*sdk.ElicitResult)
	return ok && (er.Action == "decline" || er.Action == "cancel")
}

// Result turns an error from Token into the answer to the tool call. It returns either a result
// (an input_required result, or a tool error) or a *jsonrpc.Error (the -32042 URL elicitation
// error, or invalid params for a refused requestState); return both unchanged from a
// sdk.ToolHandler. From a sdk.ToolHandlerFor, use Tool, which handles the typed output.
func (r *Relay) Result(ctx context.Context, req *sdk.CallToolRequest, err error) (*sdk.CallToolResult, error) {
	if err == nil {
		return nil, errors.New("latchkey: Relay.Result called without an error")
	}
	if errors.Is(err, ErrStateInvalid) || errors.Is(err, ErrStateExpired) ||
		errors.Is(err, ErrStateOtherPerson) || errors.Is(err, ErrStateOtherRequest) {
		return nil, &jsonrpc.Error{
			Code:    jsonrpc.CodeInvalidParams,
			Message: "requestState refused: " + err.Error() + "; call the tool again without it",
		}
	}
	var cr *ConnectRequired
	if !errors.As(err, &cr) {
		return toolError(failureText(err), err), nil
	}
	if cr.declined {
		return toolError("You chose not to open the link. "+linkText(cr), cr), nil
	}
	version := protocolVersion(req)
	if !urlElicitation(req) || version < ProtocolURLElicitationError {
		return toolError(linkText(cr), cr), nil
	}
	if version < ProtocolInputRequired {
		return nil, urlElicitationError(cr)
	}
	caller, cerr := r.caller(ctx, req)
	if cerr != nil || r.aead == nil {
		return toolError(linkText(cr), cr), nil //nolint:nilerr // no caller to bind a state to: the link as a tool result, as for older clients
	}
	ttl := r.StateTTL
	if ttl <= 0 {
		ttl = DefaultStateTTL
	}
	state := sealState(r.aead, requestState{
		Subject:  caller.Subject,
		Client:   caller.ClientID,
		Request:  requestDigest(req.Params),
		Audience: cr.Audience,
		Link:     cr.ID,
		Expires:  r.now().Add(ttl).Unix(),
	})
	return &sdk.CallToolResult{
		// An empty list rather than the SDK's default null: valid whether a client reads this
		// as an input_required result (which has no content) or, wrongly, as a tool result.
		Content: []sdk.Content{},
		InputRequests: sdk.InputRequestMap{
			// No elicitationId: 2026-07-28 dropped it with the completion notification.
			InputKey: &sdk.ElicitParams{Mode: "url", Message: cr.message(), URL: cr.URI},
		},
		RequestState: state,
	}, nil
}

// urlElicitationError is the 2025-11-25 URLElicitationRequiredError for the link. The SDK's own
// constructor fixes the message to "URL elicitation required"; here the message is the person's
// sentence (connect_message), as in the elicitation itself, so a client that shows only the
// error's message still says what the link is for.
func urlElicitationError(cr *ConnectRequired) *jsonrpc.Error {
	data, _ := json.Marshal(struct {
		Elicitations []*sdk.ElicitParams `json:"elicitations"`
	}{[]*sdk.ElicitParams{{
		Mode:          "url",
		ElicitationID: cr.ID,
		URL:           cr.URI,
		Message:       cr.message(),
	}}})
	return &jsonrpc.Error{Code: sdk.CodeURLElicitationRequired, Message: cr.message(), Data: data}
}

// protocolVersion is the version this tool call runs under. A request on 2026-07-28 or later
// names it in _meta. Otherwise the session's initialize decides; a client that offered a newer
// version there was still answered with a legacy one, because initialize only negotiates up to
// 2025-11-25.
func protocolVersion(req *sdk.CallToolRequest) string {
	if req.Params != nil {
		if v, ok := req.Params.GetMeta()[sdk.MetaKeyProtocolVersion].(string); ok && v != "" {
			return v
		}
	}
	v := req.ProtocolVersion()
	if v >= ProtocolInputRequired {
		return ProtocolURLElicitationError
	}
	return v
}

// urlElicitation reports whether the client declared URL-mode elicitation: per request from
// 2026-07-28 on, at initialize before.
func urlElicitation(req *sdk.CallToolRequest) bool {
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
}

// linkText is the plain answer for clients that cannot show a URL elicitation: the agent reads
// it and passes the link on to the person.
func linkText(cr *ConnectRequired) string {
	var b strings.Builder
	b.WriteString(cr.message())
	b.WriteString("\n")
	b.WriteString(cr.URI)
	b.WriteString("\n")
	if cr.ExpiresIn > 0 {
		fmt.Fprintf(&b, "The link stays open for %s and only works for you, signed in. ", roundDuration(cr.ExpiresIn))
	} else {
		b.WriteString("The link only works for you, signed in. ")
	}
	b.WriteString("When you have finished, ask again.")
	return b.String()
}

func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d >= time.Minute:
		return plural(int((d+30*time.Second)/time.Minute), "minute")
	default:
		return plural(int(d/time.Second), "second")
	}
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// failureText says what went wrong without internal detail: OAuth errors are meant for the
// client anyway; transport failures are not.
func failureText(err error) string {
	var oe *OAuthError
	switch {
	case errors.As(err, &oe):
		s := fmt.Sprintf("Latchkey refused a token for %q (%s)", oe.Audience, oe.Code)
		if oe.Description != "" {
			s += ": " + oe.Description
		}
		return s
	case errors.Is(err, ErrNoCaller):
		return "This tool needs a caller signed in with Latchkey."
	default:
		return "Could not reach Latchkey to get a token for this tool; try again later."
	}
}

// toolError is a tool error result whose text is shown to the agent; the cause stays on the
// result for server middleware (sdk.CallToolResult.GetError).
func toolError(text string, cause error) *sdk.CallToolResult {
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
	res.SetError(cause)
	return res
}

// ToolHandler is a typed tool handler that receives the person's token at the connected service.
type ToolHandler[In, Out any] func(ctx context.Context, req *sdk.CallToolRequest, in In, tok *Token) (*sdk.CallToolResult, Out, error)

// Tool wraps h so that it runs only with the caller's token at the service audience names; when
// Latchkey answers with a connect link instead, the call is answered as Relay.Result describes
// and h does not run.
//
//	sdk.AddTool(server, &sdk.Tool{Name: "list_repos"}, latchkey.Tool(relay, "github", listRepos))
func Tool[In, Out any](r *Relay, audience string, h ToolHandler[In, Out]) sdk.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
		tok, err := r.Token(ctx, req, audience)
		if err == nil {
			return h(ctx, req, in, tok)
		}
		var zero Out
		res, rpcErr := r.Result(ctx, req, err)
		if rpcErr != nil {
			// The SDK passes a *jsonrpc.Error through as a protocol error; anything else becomes
			// a tool error.
			return nil, zero, rpcErr
		}
		if res.IsError {
			// Returned as an error so the SDK builds the error result itself, without a
			// structured zero value of Out.
			return nil, zero, &textError{text: res.Content[0].(*sdk.TextContent).Text, err: res.GetError()}
		}
		return res, zero, nil
	}
}

// textError shows text in the tool result and keeps the cause for errors.As.
type textError struct {
	text string
	err  error
}

func (e *textError) Error() string { return e.text }
func (e *textError) Unwrap() error { return e.err }
