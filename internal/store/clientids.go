package store

import (
	"context"
	"time"
)

// ClientIDHolders records which namespace holds each OAuthClient id of a project
// (docs/decisions/0067). What is stored under a client id (grants, agents' permissions, tokens)
// outlives the OAuthClient, so the id stays with the namespace that first served it.
type ClientIDHolders interface {
	// HoldClientID makes namespace the holder of clientID in project unless a namespace holds
	// it already, and returns the holder: namespace itself, or the namespace that held it
	// first. Concurrent calls for one id agree on one holder.
	HoldClientID(ctx context.Context, project, clientID, namespace string, now time.Time) (holder string, err error)
}
