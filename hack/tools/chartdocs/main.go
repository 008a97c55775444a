// Command chartdocs writes a chart's README.md from README.md.gotmpl and the chart's
// values.yaml: every value with its default and the comment above it (or, for a value without
// one, its description in values.schema.json), so the README says what values.yaml says and
// cannot drift from it. The README also lists the Connector presets compiled into Latchkey,
// read from the catalog's data files (internal/upstream/catalog/presets beside the chart), so a
// new provider shows up in the chart's documentation without anyone editing it. With -check it writes nothing and fails when
// README.md is not what it would write (`make chart-lint` runs that).
//
//	chartdocs [-check] charts/latchkey
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"
)

func main() {
	check := flag.Bool("check", false, "fail if README.md is stale instead of writing it")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: chartdocs [-check] CHART_DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *check); err != nil {
		fmt.Fprintln(os.Stderr, "chartdocs:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	out, err := render(dir)
	if err != nil {
		return err
	}
	readme := filepath.Join(dir, "README.md")
	if check {
		have, err := os.ReadFile(readme)
		if err != nil || !bytes.Equal(have, out) {
			return fmt.Errorf("%s is not what values.yaml and README.md.gotmpl make: run `make chart-docs` and commit it", readme)
		}
		return nil
	}
	return os.WriteFile(readme, out, 0o644)
}

type chartMeta struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	KubeVersion string `json:"kubeVersion"`
	Description string `json:"description"`
}

func render(dir string) ([]byte, error) {
	var chart chartMeta
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if err := sigsyaml.Unmarshal(b, &chart); err != nil {
		return nil, err
	}
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml is not a mapping")
	}
	schema, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(schema, &descriptions); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	tables, repository, err := valueTables(doc.Content[0])
	if err != nil {
		return nil, err
	}
	presets, err := presetTable(filepath.Join(dir, "..", "..", "internal", "upstream", "catalog", "presets"))
	if err != nil {
		return nil, err
	}
	tmpl, err := template.ParseFiles(filepath.Join(dir, "README.md.gotmpl"))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = tmpl.Execute(&buf, map[string]any{
		"Chart": chart,
		// The chart's registry: where the image is, with the chart beside it under charts/.
		"Registry": strings.TrimSuffix(repository, "/"+chart.Name),
		"Values":   tables,
		"Presets":  presets,
	})
	return buf.Bytes(), err
}

type row struct{ key, typ, def, desc string }

// schemaNode is the part of values.schema.json read here: each value's description.
type schemaNode struct {
	Description string                `json:"description"`
	Properties  map[string]schemaNode `json:"properties"`
}

var descriptions schemaNode

// describe is the comment above a value, or else its description in the schema.
func describe(key string, k *yaml.Node) string {
	if c := comment(k.HeadComment); c != "" {
		return c
	}
	return strings.ReplaceAll(schemaAt(key).Description, "|", `\|`)
}

func schemaAt(key string) schemaNode {
	n := descriptions
	for p := range strings.SplitSeq(key, ".") {
		n = n.Properties[p]
	}
	return n
}

// section reports whether a mapping value is documented key by key: the schema lists its keys.
// A value passed to Kubernetes as written (resources, securityContext) is one row.
func section(key string, v *yaml.Node) bool {
	return v.Kind == yaml.MappingNode && len(v.Content) > 0 && schemaAt(key).Properties != nil
}

// valueTables writes one table for the top-level scalars and lists, then a section per
// top-level mapping: its comment, and a table of everything under it.
func valueTables(root *yaml.Node) (string, string, error) {
	var general []row
	var sections strings.Builder
	repository := ""
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if section(k.Value, v) {
			var rows []row
			leaves(k.Value, v, &rows)
			for _, r := range rows {
				if r.key == "`image.repository`" {
					repository = strings.Trim(r.def, "`\"")
				}
			}
			fmt.Fprintf(&sections, "\n### `%s`\n\n", k.Value)
			if c := describe(k.Value, k); c != "" {
				sections.WriteString(c + "\n\n")
			}
			sections.WriteString(table(rows))
			continue
		}
		general = append(general, leaf(k.Value, k, v))
	}
	if repository == "" {
		return "", "", errors.New("values.yaml has no image.repository")
	}
	return table(general) + sections.String(), repository, nil
}

func leaves(prefix string, m *yaml.Node, rows *[]row) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + "." + k.Value
		if section(key, v) {
			if c := describe(key, k); c != "" {
				*rows = append(*rows, row{key: "`" + key + "`", typ: "object", def: "", desc: c})
			}
			leaves(key, v, rows)
			continue
		}
		*rows = append(*rows, leaf(key, k, v))
	}
}

func leaf(key string, k, v *yaml.Node) row {
	typ := map[string]string{"!!str": "string", "!!int": "int", "!!bool": "bool", "!!null": "null", "!!float": "number"}[v.Tag]
	switch v.Kind {
	case yaml.SequenceNode:
		typ = "list"
	case yaml.MappingNode:
		typ = "object"
	}
	var val any
	_ = v.Decode(&val)
	def, _ := json.Marshal(val)
	return row{key: "`" + key + "`", typ: typ, def: "`" + string(def) + "`", desc: describe(key, k)}
}

// indented marks a comment line that is an example (a command, a value), not prose.
var indented = regexp.MustCompile(`^#\s{2,}`)

// comment turns a YAML head comment into one Markdown table cell: prose lines joined, example
// lines as code.
func comment(c string) string {
	var parts []string
	for l := range strings.SplitSeq(c, "\n") {
		if strings.TrimSpace(strings.TrimPrefix(l, "#")) == "" {
			continue
		}
		if indented.MatchString(l) {
			parts = append(parts, "`"+strings.TrimSpace(strings.TrimPrefix(l, "#"))+"`")
			continue
		}
		parts = append(parts, strings.TrimSpace(strings.TrimPrefix(l, "#")))
	}
	return strings.ReplaceAll(strings.Join(parts, " "), "|", `\|`)
}

func table(rows []row) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.key, r.typ, strings.ReplaceAll(r.def, "|", `\|`), r.desc)
	}
	return b.String()
}

// presetTable renders the catalog's presets as a Markdown table, one row a file, in file-name
// order: the preset name (the file's name), the display name and what it connects.
func presetTable(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no presets in %s", dir)
	}
	var b strings.Builder
	b.WriteString("| `spec.preset` | service | connects |\n|---|---|---|\n")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		var p struct {
			DisplayName string `json:"displayName"`
			Connects    string `json:"connects"`
		}
		if err := sigsyaml.Unmarshal(raw, &p); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, p.DisplayName, strings.ReplaceAll(p.Connects, "|", "\\|"))
	}
	return b.String(), nil
}
