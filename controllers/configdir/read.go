package configdir

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/admission"
)

// maxFileSize bounds one input file; a directory of Latchkey objects is small.
const maxFileSize = 4 << 20

// place is where a document is: the file (relative to the directory), the line its document
// starts on, and its position in the file.
type place struct {
	file     string
	line     int
	document int
}

func (p place) String() string {
	return fmt.Sprintf("%s:%d (document %d)", p.file, p.line, p.document)
}

// loadError is a refusal of one document, or of one file, with where it is.
type loadError struct {
	at  place
	err error
}

func (e *loadError) Error() string { return e.at.String() + ": " + e.err.Error() }
func (e *loadError) Unwrap() error { return e.err }

// read is one reading of the directory: every object it declares, admitted, and where each came
// from. The objects carry no uid, creation time or generation yet (identities adds them).
type read struct {
	objs  controllers.Objects
	where map[string]place // by objectKey
	// secretFiles are files that declare a Secret, for the permission warning.
	secretFiles []string
}

// objectKey names an object within the directory: "Kind namespace/name" ("Namespace name").
func objectKey(kind, namespace, name string) string {
	if namespace == "" {
		return kind + " " + name
	}
	return kind + " " + namespace + "/" + name
}

// inputFiles lists the directory's YAML and JSON files, recursively, in lexical order. Names
// starting with "." are skipped (editors' swap files, a mounted volume's ..data), and so are
// kustomization files, so a directory `kubectl apply -k` takes is read as it is.
func inputFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if path != dir && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		if base := strings.TrimSuffix(name, filepath.Ext(name)); base == "kustomization" || base == "Kustomization" {
			return nil
		}
		files = append(files, path)
		return nil
	})
	slices.Sort(files)
	return files, err
}

// readDir reads and admits every object in dir. It stops at the first file with a problem: a
// directory is applied whole or not at all.
func readDir(ctx context.Context, dir, defaultNamespace string, adm *admission.Admitter) (*read, error) {
	files, err := inputFiles(dir)
	if err != nil {
		return nil, err
	}
	r := &read{where: map[string]place{}}
	for _, path := range files {
		rel, _ := filepath.Rel(dir, path)
		data, err := readFile(path)
		if err != nil {
			return nil, &loadError{at: place{file: rel}, err: err}
		}
		for i, doc := range splitDocuments(data) {
			at := place{file: rel, line: doc.line, document: i + 1}
			if err := r.add(ctx, at, doc.text, defaultNamespace, adm); err != nil {
				return nil, &loadError{at: at, err: err}
			}
		}
	}
	return r, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("larger than %d MiB", maxFileSize>>20)
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

type document struct {
	text []byte
	line int // where the document's first line is, 1-based
}

var separator = regexp.MustCompile(`^---(\s.*)?$`)

// splitDocuments splits a YAML stream at "---" lines, keeping where each document starts.
// Documents holding only comments and blank lines are dropped, as kubectl drops them; so is a
// document of JSON's whitespace.
func splitDocuments(data []byte) []document {
	var out []document
	var cur bytes.Buffer
	start := 1
	flush := func() {
		if hasContent(cur.Bytes()) {
			out = append(out, document{text: bytes.Clone(cur.Bytes()), line: start})
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), maxFileSize)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if separator.MatchString(line) {
			flush()
			start = n + 1
			continue
		}
		if cur.Len() == 0 && strings.TrimSpace(line) == "" || cur.Len() == 0 && strings.HasPrefix(strings.TrimSpace(line), "#") {
			// The document starts at its first line of content, which is the line to look at.
			start = n + 1
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	flush()
	return out
}

func hasContent(b []byte) bool {
	for line := range strings.SplitSeq(string(b), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

var (
	namespaceGVK = corev1.SchemeGroupVersion.WithKind("Namespace")
	secretGVK    = corev1.SchemeGroupVersion.WithKind("Secret")
)

// add admits one document and keeps it.
func (r *read) add(ctx context.Context, at place, text []byte, defaultNamespace string, adm *admission.Admitter) error {
	var m map[string]any
	if err := yaml.Unmarshal(text, &m); err != nil {
		return fmt.Errorf("not YAML or JSON: %w", err)
	}
	if m == nil {
		return nil
	}
	u := &unstructured.Unstructured{Object: m}
	gvk := u.GroupVersionKind()
	if gvk.Kind == "" || u.GetAPIVersion() == "" {
		return errors.New("a document has no apiVersion or kind")
	}
	switch {
	case gvk == namespaceGVK:
		var ns corev1.Namespace
		if err := decodeStrict(text, &ns); err != nil {
			return err
		}
		ns.Namespace = ""
		if errs := metavalidation.ValidateObjectMetaAccessor(&ns, false, metavalidation.ValidateNamespaceName, field.NewPath("metadata")); len(errs) > 0 {
			return apierrors.NewInvalid(gvk.GroupKind(), ns.Name, errs)
		}
		r.objs.Namespaces = append(r.objs.Namespaces, ns)
		return r.record(at, "Namespace", "", ns.Name)
	case gvk == secretGVK:
		sec, err := decodeSecret(text, defaultNamespace)
		if err != nil {
			return err
		}
		r.objs.Secrets = append(r.objs.Secrets, *sec)
		r.secretFiles = append(r.secretFiles, at.file)
		return r.record(at, "Secret", sec.Namespace, sec.Name)
	case adm.Knows(gvk):
		if u.GetNamespace() == "" {
			u.SetNamespace(defaultNamespace)
		}
		if err := adm.Admit(ctx, u); err != nil {
			return err
		}
		return r.addLatchkey(at, u)
	}
	return fmt.Errorf("%s %s is not read here: a configuration directory holds Project, OAuthClient, RedirectPolicy and Connector (%s), Secret and Namespace (v1)",
		u.GetAPIVersion(), gvk.Kind, v1alpha1.GroupVersion)
}

// addLatchkey converts an admitted object to its Go type.
func (r *read) addLatchkey(at place, u *unstructured.Unstructured) error {
	conv := runtime.DefaultUnstructuredConverter
	ns, name := u.GetNamespace(), u.GetName()
	var err error
	switch u.GetKind() {
	case "Project":
		var o v1alpha1.Project
		err = conv.FromUnstructured(u.Object, &o)
		r.objs.Projects = append(r.objs.Projects, o)
	case "OAuthClient":
		var o v1alpha1.OAuthClient
		err = conv.FromUnstructured(u.Object, &o)
		r.objs.OAuthClients = append(r.objs.OAuthClients, o)
	case "Connector":
		var o v1alpha1.Connector
		err = conv.FromUnstructured(u.Object, &o)
		r.objs.Connectors = append(r.objs.Connectors, o)
	case "RedirectPolicy":
		var o v1alpha1.RedirectPolicy
		err = conv.FromUnstructured(u.Object, &o)
		r.objs.RedirectPolicies = append(r.objs.RedirectPolicies, o)
	default:
		return fmt.Errorf("kind %s has no Go type here", u.GetKind())
	}
	if err != nil {
		return err
	}
	return r.record(at, u.GetKind(), ns, name)
}

// record refuses a second object of the same kind and name: in a directory that is a mistake
// (two files each meaning to be the one), where the API server would let the later overwrite.
func (r *read) record(at place, kind, namespace, name string) error {
	key := objectKey(kind, namespace, name)
	if first, dup := r.where[key]; dup {
		return fmt.Errorf("%s is declared twice: first at %s", key, first)
	}
	r.where[key] = at
	return nil
}

func decodeStrict(text []byte, into any) error {
	if err := yaml.UnmarshalStrict(text, into); err != nil {
		return fmt.Errorf("strict decoding error: %w", err)
	}
	return nil
}

// decodeSecret reads a Secret as the API server stores it: stringData merged into data (it wins
// on a shared key), type Opaque by default, name and keys checked.
func decodeSecret(text []byte, defaultNamespace string) (*corev1.Secret, error) {
	var sec corev1.Secret
	if err := decodeStrict(text, &sec); err != nil {
		return nil, err
	}
	if sec.Namespace == "" {
		sec.Namespace = defaultNamespace
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	for k, v := range sec.StringData {
		sec.Data[k] = []byte(v)
	}
	sec.StringData = nil
	if sec.Type == "" {
		sec.Type = corev1.SecretTypeOpaque
	}
	errs := metavalidation.ValidateObjectMetaAccessor(&sec, true, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	for k := range sec.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
		}
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, sec.Name, errs)
	}
	return &sec, nil
}
