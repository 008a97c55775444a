package mcp

import (
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewStreamableHandler serves one MCP endpoint to clients of both protocol generations.
//
// The SDK serves 2026-07-28 only from a stateless handler, while a 2025-11-25 client declares
// its capabilities (URL elicitation among them) once, at initialize, which only a stateful
// handler remembers; a stateless one would forget it and the relay could never send -32042.
// So requests whose Mcp-Protocol-Version header is 2026-07-28 or later go to a stateless
// handler, and all others (initialize carries no header) to a stateful one.
//
// opts applies to both; its Stateless field is ignored.
func NewStreamableHandler(getServer func(*http.Request) *sdk.Server, opts *sdk.StreamableHTTPOptions) http.Handler {
	var stateful, stateless sdk.StreamableHTTPOptions
	if opts != nil {
		stateful, stateless = *opts, *opts
	}
	stateful.Stateless = false
	stateless.Stateless = true
	legacy := sdk.NewStreamableHTTPHandler(getServer, &stateful)
	modern := sdk.NewStreamableHTTPHandler(getServer, &stateless)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Protocol-Version") >= ProtocolInputRequired {
			modern.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
}
