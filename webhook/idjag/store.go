package idjag

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// IssueStore is what issuing an ID-JAG reads: the subject token and its person.
type IssueStore interface {
	GetToken(ctx context.Context, hash []byte) (store.Token, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
}

// RedeemStore is what redeeming an ID-JAG uses: it spends the assertion's jti
// (store.Replays), finds or creates the person, and issues tokens.
type RedeemStore interface {
	UseOnce(ctx context.Context, key []byte, expiresAt, now time.Time) error
	FindPerson(ctx context.Context, project, source, sourceSubject string) (store.Person, error)
	UpsertPerson(ctx context.Context, p store.Person) (store.Person, error)
	CreateTokens(ctx context.Context, tokens ...store.Token) error
}

// Store is what ID-JAGs use in both directions.
type Store interface {
	IssueStore
	RedeemStore
}
