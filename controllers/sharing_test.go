//go:build !latchkey_local

package controllers

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// The Project decides who uses an Organisation Connector's shared account: the Connector
// reports NoSharedClients until the Project names clients, then Shared; the compiled connector
// carries exactly the clients the Project named. A Personal Connector the Project names reports
// SharingMismatch and compiles no shared clients, so a Project entry cannot turn people's own
// accounts into a shared one.
func TestConnectorSharing(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	project := newProject(t, ns, "proj", nil)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh-app", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "upstream-secret"},
	})
	shared := newConnector(ns, "github", "proj", "gh-app")
	shared.Spec.Sharing = v1alpha1.SharingOrganisation
	create(t, shared)
	personal := newConnector(ns, "gitlab", "proj", "gh-app")
	personal.Spec.Audience = "gitlab-personal"
	create(t, personal)

	waitReady(t, shared)
	waitCondition(t, shared, v1alpha1.ConnectorSharedCondition, metav1.ConditionFalse, v1alpha1.ConnectorNoSharedClientsReason)
	// A Personal Connector the Project does not name has no Shared condition at all.
	waitReady(t, personal)
	if c := meta.FindStatusCondition(personal.Status.Conditions, v1alpha1.ConnectorSharedCondition); c != nil {
		t.Fatalf("Personal connector has %+v", c)
	}

	update(t, project, func(p *v1alpha1.Project) {
		p.Spec.SharedConnections = []v1alpha1.SharedConnectionGrant{
			{Connector: "github", Clients: []v1alpha1.OAuthClientName{"repo-helper", "other-team/bot"}},
			{Connector: v1alpha1.ConnectorName(ns + "/gitlab"), Clients: []v1alpha1.OAuthClientName{"repo-helper"}},
		}
	})
	waitCondition(t, shared, v1alpha1.ConnectorSharedCondition, metav1.ConditionTrue, v1alpha1.ConnectorSharedReason)
	waitCondition(t, personal, v1alpha1.ConnectorSharedCondition, metav1.ConditionFalse, v1alpha1.ConnectorSharingMismatchReason)
	waitSnapshot(t, "shared clients compiled", func(s *config.Snapshot) error {
		p := inProject(s, ns+"/proj")
		gh, gl := p.Connectors[ns+"/github"], p.Connectors[ns+"/gitlab"]
		if gh == nil || gl == nil {
			return errors.New("connectors not compiled yet")
		}
		if !gh.Shared || !slices.Equal(gh.SharedClients, sortedKeys(ns+"/repo-helper", "other-team/bot")) {
			return fmt.Errorf("github: shared %v clients %v", gh.Shared, gh.SharedClients)
		}
		if gl.Shared || len(gl.SharedClients) != 0 {
			return fmt.Errorf("the Personal gitlab compiled as shared: %v %v", gl.Shared, gl.SharedClients)
		}
		return nil
	})
}

func sortedKeys(s ...string) []string { slices.Sort(s); return s }
