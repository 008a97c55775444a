//go:build !latchkey_local

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"latchkey.dev/latchkey/internal/devcerts"
	"latchkey.dev/latchkey/webhook/admin"
)

// TestFrontProxyReload: when the front-proxy CA rotates, in the kube-apiserver's ConfigMap or
// in the file given by flag, the next reload hands the new CA to the admin server, without a
// restart; a reload that finds nothing new, or cannot read a CA, leaves the server as it is.
// (webhook/admin's TestFrontProxyRotation shows the server refusing the old CA once handed
// the new one.)
func TestFrontProxyReload(t *testing.T) {
	oldCA, err := devcerts.NewCA("front-proxy-ca")
	must(t, err)
	newCA, err := devcerts.NewCA("front-proxy-ca-2")
	must(t, err)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: authConfigMapNamespace, Name: authConfigMapName},
		Data: map[string]string{"requestheader-client-ca-file": string(oldCA.PEM), "requestheader-allowed-names": `["front-proxy-client"]`}}
	cl := fake.NewClientBuilder().WithObjects(cm).Build()
	dir := t.TempDir()
	caFile := filepath.Join(dir, "front-proxy-ca.crt")
	must(t, os.WriteFile(caFile, oldCA.PEM, 0o600))

	for _, tc := range []struct {
		name   string
		o      adminOptions
		rotate func(pem []byte)
	}{
		{"ConfigMap", adminOptions{}, func(pem []byte) {
			cm.Data["requestheader-client-ca-file"] = string(pem)
			must(t, cl.Update(t.Context(), cm))
		}},
		{"file", adminOptions{clientCAFile: caFile, allowedNames: "front-proxy-client"}, func(pem []byte) {
			must(t, os.WriteFile(caFile, pem, 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.rotate(oldCA.PEM)
			var reader client.Reader = cl
			fp, err := frontProxy(t.Context(), tc.o, reader)
			must(t, err)
			var handed []admin.FrontProxy
			r := &frontProxyReloader{read: newFrontProxyReloader(tc.o, reader, nil, fp, testr.New(t)).read,
				set: func(fp admin.FrontProxy) error { handed = append(handed, fp); return nil }, current: fp, log: testr.New(t)}

			if changed, err := r.reload(t.Context()); changed || err != nil || len(handed) != 0 {
				t.Fatalf("reload with nothing new: changed %v, %v, handed %d", changed, err, len(handed))
			}
			tc.rotate(newCA.PEM)
			if changed, err := r.reload(t.Context()); !changed || err != nil || len(handed) != 1 || !handed[0].ClientCA.Equal(newCA.Pool()) ||
				handed[0].AllowedNames[0] != "front-proxy-client" {
				t.Fatalf("reload after the rotation: changed %v, %v, handed %+v", changed, err, handed)
			}
			tc.rotate([]byte("not a certificate"))
			if changed, err := r.reload(t.Context()); changed || err == nil || len(handed) != 1 || !r.current.ClientCA.Equal(newCA.Pool()) {
				t.Fatalf("reload of a broken CA: changed %v, %v; the server must keep the rotated CA", changed, err)
			}
		})
	}
}
