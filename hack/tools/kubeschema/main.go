// Command kubeschema writes the JSON schemas kubeconform validates against, without downloading
// anything but Go modules: the built-in kinds of each Kubernetes version from the OpenAPI
// document in the k8s.io/kubernetes module of that version (api/openapi-spec/swagger.json, the
// file the published kubernetes-json-schema sets are made from), and custom kinds from CRD
// manifests in other modules (the Gateway API's HTTPRoute).
//
//	kubeschema -out DIR -kubernetes 1.30.14,1.37.2 -crd sigs.k8s.io/gateway-api@v1.6.3/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml
//
// The layout is kubeconform's: DIR/v{version}-standalone-strict/{kind}-{group}-{version}.json for
// built-in kinds, DIR/crds/{kind}-{group}-{version}.json for custom ones. A version already
// written is not written again. docs/decisions/0035 says why this, and what it does not check.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kubeschema:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kubeschema", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write the schemas into (required)")
	versions := fs.String("kubernetes", "", "comma- or space-separated Kubernetes versions (x.y.z)")
	var crds multi
	fs.Var(&crds, "crd", "module@version/path of a CRD manifest (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	for _, v := range strings.FieldsFunc(*versions, func(r rune) bool { return r == ',' || r == ' ' }) {
		dir := filepath.Join(*out, "v"+v+"-standalone-strict")
		if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
			continue
		}
		mod, err := download("k8s.io/kubernetes@v" + v)
		if err != nil {
			return err
		}
		doc, err := os.ReadFile(filepath.Join(mod, "api", "openapi-spec", "swagger.json"))
		if err != nil {
			return err
		}
		n, err := writeBuiltins(doc, dir)
		if err != nil {
			return fmt.Errorf("Kubernetes %s: %w", v, err)
		}
		fmt.Fprintf(os.Stderr, "kubeschema: %d kinds of Kubernetes %s\n", n, v)
	}
	for _, c := range crds {
		modVersion, path, ok := strings.Cut(c, "/config/")
		if !ok {
			return fmt.Errorf("-crd %q: want module@version/config/…", c)
		}
		mod, err := download(modVersion)
		if err != nil {
			return err
		}
		manifest, err := os.ReadFile(filepath.Join(mod, "config", path))
		if err != nil {
			return err
		}
		if err := writeCRDs(manifest, filepath.Join(*out, "crds")); err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
	}
	return nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

// download returns the directory of a module version in the module cache, fetching it through
// the module proxy if needed.
func download(modVersion string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Env = append(os.Environ(), "GOFLAGS=-modcacherw", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	var m struct{ Dir, Error string }
	_ = json.Unmarshal(b, &m)
	if err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s %s", modVersion, err, m.Error, stderr.String())
	}
	return m.Dir, nil
}

// fileName is kubeconform's {kind}{kindSuffix}: the kind in lower case, the group's first
// label and the version.
func fileName(group, version, kind string) string {
	name := strings.ToLower(kind)
	if group != "" {
		name += "-" + strings.ToLower(strings.Split(group, ".")[0])
	}
	return name + "-" + strings.ToLower(version) + ".json"
}

// writeBuiltins writes one standalone schema per kind of the OpenAPI v2 document: the kind's
// definition at the root and every definition it reaches under "definitions", so local $refs
// resolve without any other file.
func writeBuiltins(doc []byte, dir string) (int, error) {
	var spec struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		return 0, err
	}
	if len(spec.Definitions) == 0 {
		return 0, errors.New("no definitions")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for name, def := range spec.Definitions {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		if len(gvks) == 0 {
			continue
		}
		reached := map[string]any{}
		reach(def, spec.Definitions, reached)
		schema := map[string]any{}
		for k, v := range def {
			schema[k] = v
		}
		schema["$schema"] = "http://json-schema.org/draft-04/schema#"
		if len(reached) > 0 {
			schema["definitions"] = reached
		}
		fixed := convert(schema, true)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if kind == "" || version == "" {
				return n, fmt.Errorf("%s: a group-version-kind without kind or version", name)
			}
			if err := writeJSON(filepath.Join(dir, fileName(group, version, kind)), fixed); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644)
}

// reach adds every definition v refers to, directly or through another, to out.
func reach(v any, defs map[string]map[string]any, out map[string]any) {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			if _, seen := out[name]; !seen {
				if d, ok := defs[name]; ok {
					out[name] = d
					reach(d, defs, out)
				}
			}
		}
		for _, x := range v {
			reach(x, defs, out)
		}
	case []any:
		for _, x := range v {
			reach(x, defs, out)
		}
	}
}

// quantity is the definition of resource quantities, which YAML often writes as numbers.
const quantity = "io.k8s.apimachinery.pkg.api.resource.Quantity"

// convert makes a copy of an OpenAPI schema that validates as the API server does (for what a
// schema can say): an object with declared properties refuses any other (strict, as kubectl's
// and the server's field validation), int-or-string accepts both, a quantity accepts numbers,
// and an optional field may be null, as the API server treats null as absent.
func convert(v any, root bool) any {
	switch v := v.(type) {
	case map[string]any:
		if f, _ := v["format"].(string); f == "int-or-string" || v["x-kubernetes-int-or-string"] == true {
			return orNull(map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}, root)
		}
		out := map[string]any{}
		for k, x := range v {
			switch k {
			case "definitions":
				defs := map[string]any{}
				for name, d := range x.(map[string]any) {
					if name == quantity {
						defs[name] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
						continue
					}
					defs[name] = convert(d, false)
				}
				out[k] = defs
			case "properties":
				props := map[string]any{}
				for name, p := range x.(map[string]any) {
					props[name] = convert(p, false)
				}
				out[k] = props
			case "enum", "required", "x-kubernetes-group-version-kind":
				out[k] = x
			default:
				out[k] = convert(x, false)
			}
		}
		if _, ok := out["properties"]; ok && v["x-kubernetes-preserve-unknown-fields"] != true {
			if _, set := out["additionalProperties"]; !set {
				out["additionalProperties"] = false
			}
		}
		if t, ok := out["type"].(string); ok && !root {
			out["type"] = []any{t, "null"}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = convert(x, false)
		}
		return out
	default:
		return v
	}
}

func orNull(s map[string]any, root bool) map[string]any {
	if !root {
		s["oneOf"] = append(s["oneOf"].([]any), map[string]any{"type": "null"})
	}
	return s
}

// writeCRDs writes one schema per version of each CRD in manifest.
func writeCRDs(manifest []byte, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	found := 0
	for _, doc := range bytes.Split(manifest, []byte("\n---")) {
		var crd struct {
			Kind string `json:"kind"`
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &crd); err != nil {
			return err
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			s := v.Schema.OpenAPIV3Schema
			if s == nil {
				continue
			}
			s["$schema"] = "http://json-schema.org/draft-04/schema#"
			if err := writeJSON(filepath.Join(dir, fileName(crd.Spec.Group, v.Name, crd.Spec.Names.Kind)), convert(s, true)); err != nil {
				return err
			}
			found++
		}
	}
	if found == 0 {
		return errors.New("no CustomResourceDefinition with a schema")
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
