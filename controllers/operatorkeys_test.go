//go:build !latchkey_local

package controllers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	lkkeys "latchkey.dev/latchkey/internal/keys"
)

// TestOperatorSigningKeys: a Project with signingKeySource Operator gets keys derived from the
// operator's keys Secret, so its jwt clients are Ready without a Secret of its own; when the
// keys change (a rotation) the compiler publishes the new schedule. The API refuses a Project
// that names both sources.
func TestOperatorSigningKeys(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	p := newProject(t, ns, "proj", nil)
	update(t, p, func(p *v1alpha1.Project) { p.Spec.SigningKeySource = v1alpha1.SigningKeysFromOperator })
	jwt := newClient(ns, "jwt", v1alpha1.ProjectReference{Name: "proj"})
	jwt.Spec.AccessTokenFormat = v1alpha1.AccessTokenJWT
	create(t, jwt)
	waitReady(t, jwt)
	first := waitSnapshot(t, "operator signing key", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil || len(pr.SigningKeys) == 0 || pr.SigningKeys[0].Algorithm != "ES256" {
			return errors.New("no operator signing key compiled")
		}
		return nil
	}).Project(ns + "/proj").SigningKeys

	// A rotation: the loader stores the new set and kicks the compiler.
	set := *testSigning.Keys()
	set.Signing = append([]lkkeys.SigningKey(nil), set.Signing...)
	next := set.AddSigning(testNow.Add(time.Hour), 24*time.Hour)
	testSigning.Store(&set)
	t.Cleanup(func() {
		set.Signing = set.Signing[:len(set.Signing)-1]
		testSigning.Store(&set)
		compiler.Kick()
	})
	compiler.Kick()
	waitSnapshot(t, "rotated operator signing keys", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil || len(pr.SigningKeys) != 2 || pr.SigningKeys[0].ID != next || pr.SigningKeys[1].ID != first[0].ID {
			return fmt.Errorf("keys %v", pr.SigningKeys)
		}
		if !pr.SigningKeys[0].SignsFrom.Equal(testNow.Add(25*time.Hour)) || !pr.SigningKeys[1].SignsUntil.Equal(pr.SigningKeys[0].SignsFrom) {
			return errors.New("schedule not compiled")
		}
		return nil
	})

	both := &v1alpha1.Project{}
	both.Namespace, both.Name = ns, "both"
	both.Spec = p.Spec
	both.Spec.SigningKeySecretRef = &v1alpha1.SecretReference{Name: "keys"}
	if err := k8s.Create(t.Context(), both); err == nil || !strings.Contains(err.Error(), "signingKeySource Operator conflicts with signingKeySecretRef") {
		t.Errorf("a Project with both sources: %v", err)
	}
}
