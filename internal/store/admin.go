package store

import (
	"context"
	"time"
)

// ---------------------------------------------------------------------------------------------
// What an administrator sees and ends (webhook/admin, docs/admin.md)

// MaxPage bounds every admin listing's page: a larger Limit is cut to it, so one request never
// holds more than this many rows in memory whatever the table's size.
const MaxPage = 1000

// DefaultPage is the page size of a listing that asks for none.
const DefaultPage = 100

// AdminQuery selects one page of an admin listing. Pages are keyset pages: each continues
// after the key of the previous page's last row, so a page costs the same at any depth and
// rows written meanwhile are neither skipped nor repeated.
type AdminQuery struct {
	// Projects are the project keys ("namespace/name") to list; an empty list lists nothing.
	Projects []string
	// Subject narrows the listing to one person (Person.ID); empty: everyone.
	Subject string
	// Email narrows the people listing to people with this email; other listings ignore it.
	Email string
	// After is the Next of the previous page; nil for the first page.
	After []string
	// Limit is the page size: <= 0 means DefaultPage, more than MaxPage means MaxPage.
	Limit int
}

// PageLimit returns the page size q asks for, within bounds.
func (q AdminQuery) PageLimit() int {
	switch {
	case q.Limit <= 0:
		return DefaultPage
	case q.Limit > MaxPage:
		return MaxPage
	}
	return q.Limit
}

// PersonSummary is one row of the people listing.
type PersonSummary struct {
	Person
	// LastSignIn is when the person last signed in; zero if never recorded.
	LastSignIn time.Time
	// ActiveSessions counts the person's unexpired sessions.
	ActiveSessions int64
	// AccessEndedAt is when the person's access was last ended: by an administrator, a
	// back-channel logout or a failed re-check; zero if never.
	AccessEndedAt time.Time
}

// GrantSummary is one row of the grants listing: a consent and the live tokens it carries.
type GrantSummary struct {
	Grant
	LiveTokens int64
}

// ClientTokenCount is one row of the token-count listing.
type ClientTokenCount struct {
	Project  string
	ClientID string
	Live     int64
}

// AuditQuery selects one page of a project's audit records, oldest first.
type AuditQuery struct {
	Projects []string
	// AfterID continues after this record id; 0 from the start.
	AfterID int64
	// Since skips records older than this; zero: any time.
	Since time.Time
	// Action, Actor and Target, when set, must match exactly.
	Action, Actor, Target string
	Limit                 int
}

// AccessEnded reports what EndPersonAccess removed.
type AccessEnded struct {
	Sessions    int64
	Tokens      int64 // live tokens revoked
	Grants      int64
	Connections []Connection // removed; the caller revokes them upstream where it can
	Permissions int64
	Links       int64 // open links closed as declined
	Callbacks   int64 // pending upstream callbacks ended
	Passkeys    int64 // passkeys deleted, with their pending enrolments
	Codes       int64 // authorization codes deleted
}

// Admin is what the admin API reads and ends. Every list is one keyset page in (project, key)
// order and returns the key to continue after, or nil after the last page.
type Admin interface {
	// ListPeoplePage lists people with their last sign-in and unexpired sessions at now.
	// Key: project, id. Subject narrows to one person.
	ListPeoplePage(ctx context.Context, q AdminQuery, now time.Time) ([]PersonSummary, []string, error)
	// ListGrantsPage lists consents with their live tokens at now. Key: project, subject, client id.
	ListGrantsPage(ctx context.Context, q AdminQuery, now time.Time) ([]GrantSummary, []string, error)
	// ListConnectionsPage lists connected accounts. Key: project, id.
	ListConnectionsPage(ctx context.Context, q AdminQuery) ([]Connection, []string, error)
	// ListOpenLinksPage lists links that are open and unexpired at now. Key: project, id.
	ListOpenLinksPage(ctx context.Context, q AdminQuery, now time.Time) ([]Link, []string, error)
	// ListPasskeysPage lists people's passkeys. Key: project, credential ID (unpadded
	// base64url). Subject narrows to one person's.
	ListPasskeysPage(ctx context.Context, q AdminQuery) ([]Passkey, []string, error)
	// ListClientTokensPage counts live tokens per client at now, listing only clients that
	// hold one. Key: project, client id. Subject narrows to one person's tokens.
	ListClientTokensPage(ctx context.Context, q AdminQuery, now time.Time) ([]ClientTokenCount, []string, error)
	// ListAuditPage lists audit records oldest first, by id.
	ListAuditPage(ctx context.Context, q AuditQuery) ([]AuditRecord, error)
	// EndPersonAccess ends everything that lets the person or an agent act for them, in one
	// transaction: sessions, tokens, grants, connections with their agent permissions, open
	// links, pending upstream callbacks, passkeys and authorization codes; it records now as
	// the person's AccessEndedAt. The
	// person stays (they may sign in again if their sign-in source still admits them).
	// ErrNotFound if there is no such person; ending again succeeds with nothing to remove.
	EndPersonAccess(ctx context.Context, project, subject string, now time.Time) (AccessEnded, error)
}
