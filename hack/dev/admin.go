//go:build !latchkey_local

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/devcerts"
)

// setUpAdminAPI registers the admin API with the kube-apiserver (an APIService whose Service
// is an ExternalName to localhost, so the aggregator reaches bin/latchkey on adminAddr), creates
// the admin API's RBAC roles, and a tenant administrator bound in the demo namespace only. It
// returns the tenant administrator's kubeconfig.
func setUpAdminAPI(ctx context.Context, env *envtest.Environment, cl client.Client, agg *devcerts.Aggregation, adminCfg *rest.Config, state string) (string, error) {
	say("registering the admin API (admin.latchkey.dev) with the kube-apiserver")
	_, portText, _ := net.SplitHostPort(adminAddr)
	port, _ := strconv.Atoi(portText)
	if err := agg.Register(ctx, cl, port); err != nil {
		return "", fmt.Errorf("admin API: %w", err)
	}
	if err := devcerts.Served(ctx, adminCfg); err != nil {
		return "", fmt.Errorf("admin API: %w", err)
	}
	for i := range devcerts.Roles {
		r := devcerts.Roles[i]
		if err := cl.Create(ctx, &r); err != nil {
			return "", err
		}
	}
	if err := cl.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: tenantAdmin, Namespace: demoNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "latchkey-access-tenant"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: tenantAdmin}},
	}); err != nil {
		return "", err
	}
	u, err := env.AddUser(envtest.User{Name: tenantAdmin}, adminCfg)
	if err != nil {
		return "", err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(state, tenantAdmin+".kubeconfig")
	return path, os.WriteFile(path, b, 0o600)
}
