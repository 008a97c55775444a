package signin

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// SessionStore is what finding the signed-in person reads (Lookup, Current, Require,
// RequireFresh): every page that needs a person passes its own store, which includes this.
type SessionStore interface {
	GetSession(ctx context.Context, idHash []byte, now time.Time) (store.Session, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
}

// CeremonyStore is what a passkey ceremony keeps between its challenge and its answer
// (BeginCeremony, FinishCeremony): signing in with a passkey here, enrolling one on the account
// page.
type CeremonyStore interface {
	CreatePasskeyCeremony(ctx context.Context, c store.PasskeyCeremony) error
	TakePasskeyCeremony(ctx context.Context, idHash []byte, now time.Time) (store.PasskeyCeremony, error)
}

// Store is what signing in and out uses: people and their browser sessions, passkey sign-in,
// and ending them when the person leaves (docs/leavers.md): back-channel logout and re-checking
// people at the project's OpenID provider.
type Store interface {
	SessionStore
	CeremonyStore
	UpsertPerson(ctx context.Context, p store.Person) (store.Person, error)
	CreateSession(ctx context.Context, s store.Session) error
	DeleteSession(ctx context.Context, idHash []byte) error
	GetPasskey(ctx context.Context, project string, credentialID []byte) (store.Passkey, error)
	UsePasskey(ctx context.Context, project string, credentialID []byte, signCount uint32, backupState bool, now time.Time) error
	EndSignIns(ctx context.Context, project, subject string, now time.Time) (store.Ended, error)
	Logout(ctx context.Context, l store.Logout) (store.Ended, error)
	SavePersonCheck(ctx context.Context, c store.PersonCheck) error
	UpdatePersonCheck(ctx context.Context, project, subject string, fn func(store.PersonCheck) (store.PersonCheck, error)) (store.PersonCheck, error)
}
