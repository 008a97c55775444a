//go:build !latchkey_local

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// The workload-identity demo (docs/workload-identity.md): Repo Helper's ServiceAccount, and an
// OAuthClient that authenticates with its tokens and has no secret. Only with a cluster: the
// no-cluster mode has no ServiceAccounts to ask about.
const (
	workloadServiceAccount = "repo-helper"
	workloadClientName     = "repo-helper-workload"
	workloadClientID       = "lkc_repo-helper-workload"
)

// setUpWorkloadDemo creates the ServiceAccount and the OAuthClient, mints a token of the
// ServiceAccount for the issuer (as the kubelet would project it into Repo Helper's pod) into
// state, and returns the command that gets a token with it.
func setUpWorkloadDemo(ctx context.Context, cfg *rest.Config, issuer, state string) (string, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return "", err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return "", err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: workloadServiceAccount}}
	if err := cl.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("ServiceAccount %s/%s: %w", demoNamespace, workloadServiceAccount, err)
	}
	oc := &v1alpha1.OAuthClient{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: workloadClientName},
		Spec: v1alpha1.OAuthClientSpec{
			ProjectRef:              v1alpha1.ProjectReference{Name: "demo"},
			ClientID:                workloadClientID,
			DisplayName:             "Repo Helper (workload identity)",
			GrantTypes:              []v1alpha1.GrantType{v1alpha1.GrantClientCredentials},
			TokenEndpointAuthMethod: v1alpha1.AuthWorkloadIdentity,
			WorkloadIdentity: &v1alpha1.WorkloadIdentity{
				ServiceAccount: &v1alpha1.ServiceAccountReference{Name: workloadServiceAccount},
			},
		},
	}
	if err := cl.Create(ctx, oc); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("OAuthClient %s/%s: %w", demoNamespace, workloadClientName, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(demoNamespace).CreateToken(ctx, workloadServiceAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{issuer}, ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of ServiceAccount %s/%s: %w", demoNamespace, workloadServiceAccount, err)
	}
	path := filepath.Join(state, "repo-helper.token")
	if err := os.WriteFile(path, []byte(tr.Status.Token), 0o600); err != nil {
		return "", err
	}
	return fmt.Sprintf("curl -d grant_type=client_credentials -d client_id=%s "+
		"-d client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer "+
		"--data-urlencode client_assertion@%s %s/token", workloadClientID, path, issuer), nil
}
