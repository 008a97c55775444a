package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// samplesDir is the demo, for both modes: `make run` applies it to a control plane, `make
// run-local` serves it from its files.
const samplesDir = "config/samples"

// runLocal is `make run-local`: the same demo, served by `latchkey serve --config-dir
// config/samples` with no etcd or kube-apiserver to build or start. Runtime state, identities,
// the demo client's credentials and status files go to <state>/local.
func runLocal(ctx context.Context, o options, state, listen string) error {
	objs, err := readManifests(samplesDir)
	if err != nil {
		return err
	}
	issuers := issuersOf(objs, strings.TrimSuffix(o.publicURL, "/"))
	if len(issuers) == 0 {
		return errors.New("config/samples declares no Project, so there is nothing to serve")
	}
	stopGitHub, err := startFakeGitHub() //nolint:contextcheck // its stop function shuts down after ctx has ended
	if err != nil {
		return err
	}
	defer stopGitHub()
	stopServices, err := startDemoServices(issuers[0]) //nolint:contextcheck // as the fake GitHub's
	if err != nil {
		return err
	}
	defer stopServices()

	data := filepath.Join(state, "local")
	logPath := filepath.Join(state, "latchkey-local.log")
	srv, err := startLatchkey(o, logPath, "serve",
		"--config-dir", samplesDir,
		"--data-dir", data,
		"--public-url", o.publicURL,
		"--listen", listen,
		"--metrics-listen", "127.0.0.1:9090",
		"--log-format", "text",
	)
	if err != nil {
		return err
	}
	defer srv.stop()

	secretFile := filepath.Join(data, "secrets", demoNamespace, repoHelperSecret+".yaml")
	creds := func(context.Context) (string, string, error) {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return "", "", err
		}
		var sec corev1.Secret
		if err := yaml.Unmarshal(b, &sec); err != nil {
			return "", "", err
		}
		return string(sec.Data["client_id"]), string(sec.Data["client_secret"]), nil
	}
	// Paths under the checkout are printed relative to it, as make runs from there.
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
				return r
			}
		}
		return p
	}
	return serveDemo(ctx, srv, issuers, logPath, creds, func() error { return nil }, func() {
		fmt.Printf("config dir: %s  (no cluster: edit a file and it is applied; see docs/no-cluster.md)\n", samplesDir)
	}, func() {
		fmt.Printf("status:     %s  (one file per object; directory.yaml says whether the last edit was applied)\n", rel(filepath.Join(data, "status")))
	}, fmt.Sprintf("sed -n 's/^  client_secret: //p' %s | base64 -d", rel(secretFile)))
}
