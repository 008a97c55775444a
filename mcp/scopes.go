package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"latchkey.dev/latchkey/mcp/dpop"
)

// ProtocolClientAccumulatesScopes is the first MCP version whose clients add a scope challenge
// to the scopes they already asked for (the union is theirs to make): from it on a challenge
// names only what the operation needs, as RFC 6750 §3.1 reads. Before it, the specification's
// recommended approach has the server name what the token already has as well, so that a client
// that asks for exactly the challenge does not lose what it held.
const ProtocolClientAccumulatesScopes = ProtocolInputRequired

// scopeGate refuses, before the MCP handler reads it, a request whose token lacks the scopes
// it needs: RequiredScopes for every request, and for a tools/call also the called tool's
// ToolScopes. The refusal is RFC 6750 §3.1's 403 insufficient_scope with the scope to ask for
// (the MCP authorization specification's scope challenge), which clients answer by a step-up
// authorization.
//
// It runs after the token was verified, so the token info is on the request's context.
func (rs *ResourceServer) scopeGate(next http.Handler, dpopScheme bool) http.Handler {
	metadataURL := rs.MetadataURL()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := auth.TokenInfoFromContext(r.Context())
		if info == nil {
			// Protect puts it there before this runs; without it nothing was verified.
			http.Error(w, errUnavailable.Error(), http.StatusInternalServerError)
			return
		}
		need := slices.Clone(rs.RequiredScopes)
		var tools []string
		if len(rs.ToolScopes) > 0 && r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(io.LimitReader(r.Body, sdk.DefaultMaxRequestBodyBytes+1))
			r.Body.Close()
			switch {
			case err != nil:
				http.Error(w, "the request body could not be read", http.StatusBadRequest)
				return
			case len(body) > sdk.DefaultMaxRequestBodyBytes:
				http.Error(w, "the request body is too large", http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if tools, err = calledTools(body); err != nil {
				// Fail closed: a body this reader cannot take apart might name a tool to a
				// more lenient one. The SDK would refuse it as well.
				http.Error(w, "the request body is not JSON-RPC", http.StatusBadRequest)
				return
			}
			for _, name := range tools {
				need = union(need, rs.ToolScopes[name])
			}
		}
		if missing(need, info.Scopes) {
			ask := need
			if r.Header.Get("Mcp-Protocol-Version") < ProtocolClientAccumulatesScopes {
				ask = union(info.Scopes, need)
			}
			w.Header().Set("WWW-Authenticate", insufficientScopeChallenge(metadataURL, ask, tools, dpopScheme))
			http.Error(w, "insufficient_scope: the access token lacks a scope this request needs", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// insufficientScopeChallenge is RFC 6750 §3's challenge for a token without the scopes asked
// for, with resource_metadata as the MCP authorization specification's scope challenge has it.
// A DPoP-bound token gets it under the DPoP scheme (RFC 9449 §7.1), with algs.
func insufficientScopeChallenge(metadataURL string, scope, tools []string, dpopScheme bool) string {
	var b strings.Builder
	if dpopScheme {
		b.WriteString("DPoP ")
	} else {
		b.WriteString("Bearer ")
	}
	fmt.Fprintf(&b, `error="insufficient_scope", scope="%s"`, quotable(strings.Join(scope, " ")))
	if metadataURL != "" {
		fmt.Fprintf(&b, ", resource_metadata=%q", metadataURL)
	}
	desc := "this request needs more permission"
	if len(tools) == 1 {
		desc = "the tool " + tools[0] + " needs more permission"
	}
	fmt.Fprintf(&b, `, error_description="%s"`, quotable(desc))
	if dpopScheme {
		fmt.Fprintf(&b, `, algs="%s"`, strings.Join(dpop.Algorithms, " "))
	}
	return b.String()
}

// missing reports whether a scope in need is not in have.
func missing(need, have []string) bool {
	for _, s := range need {
		if !slices.Contains(have, s) {
			return true
		}
	}
	return false
}

// union is a followed by what of b it lacks, in order, without repeats.
func union(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	for _, s := range slices.Concat(a, b) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

var errNotJSONRPC = errors.New("not a JSON-RPC message")

// calledTools returns every tool a tools/call in body may name: body is one JSON-RPC message or
// a batch (protocol versions before 2025-06-18).
//
// The SDK decodes with its own JSON reader (exact keys, the last of repeated keys), this one is
// encoding/json; so rather than trust that both pick the same value, every value that any
// reader could take for the method or the tool name counts: every "method" and "params" key,
// repeated or in any letter case, and in params every "name" key likewise. An honest client
// sends each key once and is not affected; one that repeats keys to smuggle a tool past this
// check is asked for the scopes of every tool it named.
func calledTools(body []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	var tools []string
	switch tok {
	case json.Delim('{'):
		tools, err = messageTools(dec)
	case json.Delim('['):
		for dec.More() {
			if t, err := dec.Token(); err != nil || t != json.Delim('{') {
				return nil, errNotJSONRPC
			}
			more, err := messageTools(dec)
			if err != nil {
				return nil, err
			}
			tools = union(tools, more)
		}
		_, err = dec.Token()
	default:
		return nil, errNotJSONRPC
	}
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errNotJSONRPC
	}
	return tools, nil
}

// messageTools reads one message's members, its opening brace already read, and returns the
// tools it may call. It reads token by token, never a value twice: the body can be megabytes.
func messageTools(dec *json.Decoder) ([]string, error) {
	call := false
	var names []string
	for dec.More() {
		key, err := memberKey(dec)
		if err != nil {
			return nil, err
		}
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch {
		case strings.EqualFold(key, "method"):
			call = call || t == "tools/call"
			err = skip(dec, t)
		case strings.EqualFold(key, "params") && t == json.Delim('{'):
			var more []string
			more, err = paramNames(dec)
			names = union(names, more)
		default:
			err = skip(dec, t)
		}
		if err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if !call {
		return nil, nil
	}
	return names, nil
}

// paramNames reads the members of a params object, its opening brace already read, and returns
// every string any "name" member holds (all of them: a repeated key is not lost).
func paramNames(dec *json.Decoder) ([]string, error) {
	var names []string
	for dec.More() {
		key, err := memberKey(dec)
		if err != nil {
			return nil, err
		}
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if name, ok := t.(string); ok && strings.EqualFold(key, "name") {
			names = union(names, []string{name})
		}
		if err := skip(dec, t); err != nil {
			return nil, err
		}
	}
	_, err := dec.Token()
	return names, err
}

// skip reads the rest of a value whose first token is t.
func skip(dec *json.Decoder, t json.Token) error {
	depth := 0
	for {
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
		var err error
		if t, err = dec.Token(); err != nil {
			return err
		}
	}
}

func memberKey(dec *json.Decoder) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", err
	}
	key, ok := t.(string)
	if !ok {
		return "", errNotJSONRPC
	}
	return key, nil
}
