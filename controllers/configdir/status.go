package configdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// statusFiles keeps each object's status where `kubectl get -o yaml` would show it: one file per
// object, status/<Kind>.<namespace>.<name>.yaml, holding its identity and status. The next
// reading starts from it, so transition times and cumulative counts survive a restart.
type statusFiles struct {
	dir string
}

const directoryStatus = "directory.yaml"

func (s statusFiles) path(kind, namespace, name string) string {
	return filepath.Join(s.dir, kind+"."+namespace+"."+name+".yaml")
}

// statusDoc is one status file.
type statusDoc[S any] struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Status     S                 `json:"status"`
}

func readStatus[S any](path string, uid types.UID) (S, bool) {
	var doc statusDoc[S]
	b, err := os.ReadFile(path)
	if err != nil || yaml.Unmarshal(b, &doc) != nil || doc.Metadata.UID != uid {
		return doc.Status, false
	}
	return doc.Status, true
}

// carryOver gives each object the status it had after the last good reading.
func (s statusFiles) carryOver(r *read) {
	for i := range r.objs.Projects {
		o := &r.objs.Projects[i]
		if st, ok := readStatus[v1alpha1.ProjectStatus](s.path("Project", o.Namespace, o.Name), o.UID); ok {
			o.Status = st
		}
	}
	for i := range r.objs.OAuthClients {
		o := &r.objs.OAuthClients[i]
		if st, ok := readStatus[v1alpha1.OAuthClientStatus](s.path("OAuthClient", o.Namespace, o.Name), o.UID); ok {
			o.Status = st
		}
	}
	for i := range r.objs.Connectors {
		o := &r.objs.Connectors[i]
		if st, ok := readStatus[v1alpha1.ConnectorStatus](s.path("Connector", o.Namespace, o.Name), o.UID); ok {
			o.Status = st
		}
	}
	for i := range r.objs.RedirectPolicies {
		o := &r.objs.RedirectPolicies[i]
		if st, ok := readStatus[v1alpha1.RedirectPolicyStatus](s.path("RedirectPolicy", o.Namespace, o.Name), o.UID); ok {
			o.Status = st
		}
	}
}

func writeStatus[S any](s statusFiles, kind string, m metav1.ObjectMeta, st S, written map[string]bool) error {
	path := s.path(kind, m.Namespace, m.Name)
	written[path] = true
	doc := statusDoc[S]{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       kind,
		Metadata: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID,
			Generation: m.Generation, CreationTimestamp: m.CreationTimestamp},
		Status: st,
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o644)
}

// write records every object's status and removes the files of objects no longer declared.
func (s statusFiles) write(r *read) error {
	written := map[string]bool{filepath.Join(s.dir, directoryStatus): true}
	var errs []error
	for _, o := range r.objs.Projects {
		errs = append(errs, writeStatus(s, "Project", o.ObjectMeta, o.Status, written))
	}
	for _, o := range r.objs.OAuthClients {
		errs = append(errs, writeStatus(s, "OAuthClient", o.ObjectMeta, o.Status, written))
	}
	for _, o := range r.objs.Connectors {
		errs = append(errs, writeStatus(s, "Connector", o.ObjectMeta, o.Status, written))
	}
	for _, o := range r.objs.RedirectPolicies {
		errs = append(errs, writeStatus(s, "RedirectPolicy", o.ObjectMeta, o.Status, written))
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		p := filepath.Join(s.dir, e.Name())
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") && !written[p] {
			errs = append(errs, os.Remove(p))
		}
	}
	return errors.Join(errs...)
}

// directoryDoc is status/directory.yaml: how the last reading of the directory went.
type directoryDoc struct {
	Directory string    `json:"directory"`
	Checked   time.Time `json:"checked"`
	// Ready is true when the last reading was applied.
	Ready bool `json:"ready"`
	// Readings counts the good readings since start; 0 means nothing is served yet.
	Readings int `json:"readings"`
	// Error says which file and document the last reading refused, and why.
	Error string `json:"error,omitempty"`
}

func (s statusFiles) writeDirectory(dir string, checked time.Time, readings int, err error) error {
	doc := directoryDoc{Directory: dir, Checked: checked.UTC().Truncate(time.Second), Ready: err == nil, Readings: readings}
	if err != nil {
		doc.Error = err.Error()
	}
	b, merr := yaml.Marshal(doc)
	if merr != nil {
		return merr
	}
	return writeFile(filepath.Join(s.dir, directoryStatus), b, 0o644)
}
