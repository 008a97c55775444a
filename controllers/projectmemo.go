package controllers

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// projectMemo keeps each Project's compiled form between reconciles. Every OAuthClient,
// Connector and RedirectPolicy reconcile resolves its Project, and compiling one reads and
// parses its Secrets (the password file, signing keys): when ten thousand clients of one
// Project are applied at once, sixteen reconciles in flight each held a parse of the same
// password file, a good part of the operator's heap at that moment.
//
// An entry is used only while the Project's UID and generation and the resourceVersion of every
// Secret it names are what they were when it was compiled, so a reconcile never sees a result
// a fresh compilation would not give. Reconcilers only read compiled Projects; the compiler,
// which adds clients and connectors to the Projects it publishes, does not use the memo.
type projectMemo struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]*memoEntry
}

type memoEntry struct {
	uid        types.UID
	generation int64
	// secrets are the resourceVersions of the Secrets and ConfigMaps the Project names ("" for a
	// missing one).
	secrets map[string]string
	result  *projectResult
}

// lookup returns the memoised result for p if it is still current, and otherwise the Secret
// versions to store a fresh result under (nil when they could not be read).
func (m *projectMemo) lookup(ctx context.Context, c Reader, p *v1alpha1.Project) (*projectResult, map[string]string) {
	versions := secretVersions(ctx, c, p)
	key := objectKey(p)
	m.mu.Lock()
	e := m.entries[key]
	m.mu.Unlock()
	if e == nil || versions == nil || e.uid != p.UID || e.generation != p.Generation || len(versions) != len(e.secrets) {
		return nil, versions
	}
	for name, rv := range versions {
		if e.secrets[name] != rv {
			return nil, versions
		}
	}
	return e.result, versions
}

// store memoises result for p under the Secret versions read before it was compiled: if a
// Secret changed meanwhile, the entry is stale from the start and the next lookup compiles again.
func (m *projectMemo) store(p *v1alpha1.Project, versions map[string]string, result *projectResult) {
	if versions == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = map[types.NamespacedName]*memoEntry{}
	}
	m.entries[objectKey(p)] = &memoEntry{uid: p.UID, generation: p.Generation, secrets: versions, result: result}
}

// secretVersions reads the resourceVersion of every Secret and ConfigMap p names from the
// cache; nil when one cannot be read.
func secretVersions(ctx context.Context, c Reader, p *v1alpha1.Project) map[string]string {
	names := projectSecretNames(p)
	out := make(map[string]string, len(names))
	for _, name := range names {
		sec := &corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, sec, noCopy); err != nil {
			if ignoreNotFound(err) != nil {
				return nil
			}
			out[name] = ""
			continue
		}
		out[name] = sec.ResourceVersion
	}
	for _, name := range projectConfigMapNames(p) {
		cm := &corev1.ConfigMap{}
		key := "configmap/" + name // not a Secret name: those cannot hold '/'
		if err := c.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, cm, noCopy); err != nil {
			if ignoreNotFound(err) != nil {
				return nil
			}
			out[key] = ""
			continue
		}
		out[key] = cm.ResourceVersion
	}
	return out
}
