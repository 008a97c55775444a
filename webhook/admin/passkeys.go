package admin

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// Passkeys (docs/passkeys.md): an administrator sees which passkeys a person has, and removes
// one that should not be there, such as one enrolled by whoever had the person's password
// before the Project required a phishing-resistant sign-in.

func passkeyName(k store.Passkey) string { return base64.RawURLEncoding.EncodeToString(k.CredentialID) }

func aaguid(b []byte) string {
	if len(b) != 16 {
		return ""
	}
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *Server) passkeyItem(sc *scope, d *directory, k store.Passkey) item {
	p := sc.project(k.Project)
	name := passkeyName(k)
	m := meta(p, name, mtime(k.CreatedAt), k.Subject, "passkey", name)
	obj := &adminv1.Passkey{
		TypeMeta:   metav1.TypeMeta{Kind: "Passkey", APIVersion: adminv1.GroupVersion},
		ObjectMeta: *m,
		Project:    p.Name, Person: k.Subject, DisplayName: k.Name, Synced: k.BackupEligible,
		AAGUID: aaguid(k.AAGUID), Transports: k.Transports, LastUsed: optTime(k.LastUsedAt),
	}
	now := s.o.Now()
	return item{obj: obj, meta: m,
		cells: []any{name, d.email(k.Project, k.Subject), k.Name, k.BackupEligible, since(now, k.LastUsedAt),
			since(now, k.CreatedAt), p.Name, aaguid(k.AAGUID)},
		fields: fields.Set{"metadata.name": name, "metadata.namespace": p.Namespace, "person": k.Subject}}
}

func (s *Server) listPasskeys(ctx context.Context, sc *scope) ([]item, []string, error) {
	rows, next, err := s.o.Store.ListPasskeysPage(ctx, sc.query())
	return page(ctx, s, sc, rows, next, err, s.passkeyItem)
}

// findPasskey looks the credential up in each Project of the request's namespace only: another
// namespace's passkey is as absent here as one that never existed.
func (s *Server) findPasskey(ctx context.Context, sc *scope, name string) (store.Passkey, error) {
	id, err := base64.RawURLEncoding.DecodeString(name)
	if sc.namespace == "" || err != nil || len(id) == 0 {
		return store.Passkey{}, notFound(adminv1.ResourcePasskeys, name)
	}
	for _, p := range sc.projects {
		k, err := s.o.Store.GetPasskey(ctx, p.Key, id)
		if err == nil && (sc.person == "" || k.Subject == sc.person) {
			return k, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Passkey{}, err
		}
	}
	return store.Passkey{}, notFound(adminv1.ResourcePasskeys, name)
}

func (s *Server) getPasskey(ctx context.Context, sc *scope, name string) (item, error) {
	k, err := s.findPasskey(ctx, sc, name)
	if err != nil {
		return item{}, err
	}
	return s.passkeyItem(sc, s.directory(ctx), k), nil
}

// removePasskey removes one of a person's passkeys, as the person's own Remove on the account
// page does; the record names the administrator.
func (s *Server) removePasskey(ctx context.Context, sc *scope, name string, dryRun bool) (types.UID, string, error) {
	k, err := s.findPasskey(ctx, sc, name)
	if err != nil {
		return "", "", err
	}
	u := s.passkeyItem(sc, s.directory(ctx), k).meta.UID
	if dryRun {
		return u, "", nil
	}
	err = s.o.Store.DeletePasskey(ctx, k.Project, k.Subject, k.CredentialID)
	if errors.Is(err, store.ErrNotFound) {
		return "", "", notFound(adminv1.ResourcePasskeys, name)
	}
	if err != nil {
		return "", "", err
	}
	s.record(ctx, store.AuditRecord{Project: k.Project, Action: events.AdminPasskeyRemoved, Target: "person:" + k.Subject,
		Details: map[string]string{"credential_id": name, "name": k.Name}})
	return u, fmt.Sprintf("removed the passkey %q", k.Name), nil
}
