package configdir

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/controllers"
)

// identity is what the API server would keep for an object beyond its spec: its uid (an
// OAuthClient's client id derives from it), when it was created (the oldest Connector keeps a
// contested audience), and its generation, which advances when its spec changes.
type identity struct {
	UID        types.UID   `json:"uid"`
	Created    metav1.Time `json:"created"`
	Generation int64       `json:"generation"`
	SpecHash   string      `json:"specHash"`
}

// identities is the data directory's objects.yaml: the identity of every object, by objectKey.
// An object that leaves the directory loses its identity, so one declared again later is a new
// object (a new client id, its old tokens not carried over), as after a delete in a cluster.
type identities map[string]identity

const identitiesFile = "objects.yaml"

func readIdentities(dataDir string) (identities, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, identitiesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return identities{}, nil
	}
	if err != nil {
		return nil, err
	}
	ids := identities{}
	if err := yaml.UnmarshalStrict(b, &ids); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dataDir, identitiesFile), err)
	}
	return ids, nil
}

// assign gives every object of r its identity, keeping those it had, and returns the new set.
func (ids identities) assign(r *read, now time.Time) (identities, error) {
	next := identities{}
	give := func(kind string, o controllers.Object, spec any) error {
		key := objectKey(kind, o.GetNamespace(), o.GetName())
		b, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		hash := hex.EncodeToString(sum[:])
		id, ok := ids[key]
		switch {
		case !ok:
			id = identity{UID: uuid.NewUUID(), Created: metav1.NewTime(now.UTC().Truncate(time.Second)), Generation: 1, SpecHash: hash}
		case id.SpecHash != hash:
			id.Generation++
			id.SpecHash = hash
		}
		next[key] = id
		o.SetUID(id.UID)
		o.SetCreationTimestamp(id.Created)
		o.SetGeneration(id.Generation)
		return nil
	}
	var errs []error
	for i := range r.objs.Projects {
		o := &r.objs.Projects[i]
		errs = append(errs, give("Project", o, o.Spec))
	}
	for i := range r.objs.OAuthClients {
		o := &r.objs.OAuthClients[i]
		errs = append(errs, give("OAuthClient", o, o.Spec))
	}
	for i := range r.objs.Connectors {
		o := &r.objs.Connectors[i]
		errs = append(errs, give("Connector", o, o.Spec))
	}
	for i := range r.objs.RedirectPolicies {
		o := &r.objs.RedirectPolicies[i]
		errs = append(errs, give("RedirectPolicy", o, o.Spec))
	}
	return next, errors.Join(errs...)
}

func (ids identities) write(dataDir string) error {
	b, err := yaml.Marshal(map[string]identity(ids))
	if err != nil {
		return err
	}
	header := []byte("# Written by latchkey serve: the identity (uid, creation time, generation) of each object\n" +
		"# in the configuration directory. Deleting this file gives every OAuthClient a new client id.\n")
	return writeFile(filepath.Join(dataDir, identitiesFile), append(header, b...), 0o600)
}

// credentials keeps OAuthClient credentials Secrets as files under dataDir/secrets/, the way the
// reconciler keeps them in the cluster: created once with a fresh client secret, completed when
// something is missing, never replaced, and removed with their OAuthClient.
type credentials struct {
	dir string
}

func (c credentials) path(namespace, name string) string {
	return filepath.Join(c.dir, namespace, name+".yaml")
}

// ensure adds to r the credentials Secret of every OAuthClient, writing those that are new or
// incomplete. A Secret of that name in the configuration directory is used as it is, and is the
// client's only if Latchkey created it (otherwise the client reports SecretConflict, as in a
// cluster). It returns the files in use.
func (c credentials) ensure(r *read) (map[string]bool, error) {
	inDir := map[types.NamespacedName]bool{}
	for _, s := range r.objs.Secrets {
		inDir[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = true
	}
	used := map[string]bool{}
	for i := range r.objs.OAuthClients {
		oc := &r.objs.OAuthClients[i]
		if !controllers.WritesCredentials(oc) {
			// Its secret is in a Secret of the directory (spec.clientSecretRef).
			continue
		}
		name := controllers.CredentialsSecretName(oc)
		if inDir[types.NamespacedName{Namespace: oc.Namespace, Name: name}] {
			continue
		}
		path := c.path(oc.Namespace, name)
		current, err := readSecretFile(path)
		if err != nil {
			return nil, err
		}
		sec, changed, err := controllers.CredentialsSecret(oc, current)
		if err != nil {
			return nil, err
		}
		if changed {
			if err := writeSecretFile(path, sec); err != nil {
				return nil, err
			}
		}
		used[path] = true
		r.objs.Secrets = append(r.objs.Secrets, *sec)
	}
	return used, nil
}

// files lists the credentials files.
func (c credentials) files() ([]string, error) {
	var out []string
	err := filepath.WalkDir(c.dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && !d.IsDir() {
			out = append(out, path)
		}
		return err
	})
	return out, err
}

// prune removes credentials files no OAuthClient uses any more, as the garbage collector
// removes a Secret with its owner.
func (c credentials) prune(used map[string]bool) error {
	return filepath.WalkDir(c.dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() || used[path] || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		return os.Remove(path)
	})
}

func readSecretFile(path string) (*corev1.Secret, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var sec corev1.Secret
	if err := yaml.UnmarshalStrict(b, &sec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &sec, nil
}

func writeSecretFile(path string, sec *corev1.Secret) error {
	out := sec.DeepCopy()
	out.APIVersion, out.Kind = "v1", "Secret"
	b, err := yaml.Marshal(out)
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}

// writeFile replaces path atomically (a reader sees the old file or the new one, never half),
// and only when its content changes.
func writeFile(path string, data []byte, perm os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
