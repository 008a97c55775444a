package store

import (
	"context"
	"strings"
	"time"
)

// ---------------------------------------------------------------------------------------------
// Organisation-shared connections (docs/shared-connections.md)

// SharedSubjectPrefix starts the subject of every shared connection. No person's subject ever
// starts with it: people's ids are random hex (secret.NewID), and the store refuses a person
// whose id starts with it (a trigger on SQLite, a CHECK constraint on PostgreSQL), so a
// person's token, session, consent or end of access can never name a shared connection, and a
// shared connection is never one of a person's.
const SharedSubjectPrefix = "shared:"

// SharedSubject is the subject of the shared connection of the connector with key
// "namespace/name": one per connector and project.
func SharedSubject(connector string) string { return SharedSubjectPrefix + connector }

// IsSharedSubject reports whether subject names a shared connection rather than a person.
func IsSharedSubject(subject string) bool { return strings.HasPrefix(subject, SharedSubjectPrefix) }

// SharedStart is a start URL an administrator asked for: whoever opens it first, before
// ExpiresAt, starts connecting the shared account of Connector in that browser. Only CodeHash
// (the SHA-256 of the URL's code) is stored.
type SharedStart struct {
	CodeHash  []byte
	ID        string // names the start in audit records
	Project   string
	Connector string
	Actor     string // "kubernetes:<username>", who asked for it
	CreatedAt time.Time
	ExpiresAt time.Time
}

// SharedConnections is what connecting, using and ending shared connections needs.
type SharedConnections interface {
	CreateSharedStart(ctx context.Context, s SharedStart) error
	// TakeSharedStart deletes and returns the live start with codeHash: a start URL works once.
	// ErrNotFound when there is none, or it expired at or before now.
	TakeSharedStart(ctx context.Context, codeHash []byte, now time.Time) (SharedStart, error)
	// SaveSharedConnection stores c (whose Subject must be SharedSubject(c.Connector)) as the
	// one shared connection of its connector, in one transaction: the same account is updated
	// in place, and any other account connected before is deleted and returned in replaced, so
	// the caller can revoke it at the service.
	SaveSharedConnection(ctx context.Context, c Connection) (saved Connection, replaced []Connection, err error)
	// ListSharedConnections returns the shared connections of a project, by connector.
	ListSharedConnections(ctx context.Context, project string) ([]Connection, error)
}
