package controllers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// argoHealthScript is the Argo CD health check Latchkey ships (docs/gitops.md).
var argoHealthScript = filepath.Join("..", "config", "argocd", "health.lua")

// argoHealth is config/argocd/health.lua in Go, so the rules can be read and tested where no
// Lua interpreter is installed; TestArgoCDHealthScript holds the two to the same answers.
func argoHealth(obj map[string]any) (status, message string) {
	st, _ := obj["status"].(map[string]any)
	conds, _ := st["conditions"].([]any)
	if st == nil || conds == nil {
		return "Progressing", "waiting for the Latchkey controller"
	}
	var ready, degraded map[string]any
	for _, c := range conds {
		c, _ := c.(map[string]any)
		switch c["type"] {
		case "Ready":
			ready = c
		case "Degraded":
			degraded = c
		}
	}
	says := func(c map[string]any) string { return str(c["reason"]) + ": " + str(c["message"]) }
	switch {
	case ready != nil && ready["status"] == "False":
		return "Degraded", says(ready)
	case degraded != nil && degraded["status"] == "True":
		return "Degraded", says(degraded)
	case ready != nil && ready["status"] == "True":
		md, _ := obj["metadata"].(map[string]any)
		gen, ok := md["generation"]
		if ok && fmt.Sprint(st["observedGeneration"]) == fmt.Sprint(gen) {
			return "Healthy", str(ready["message"])
		}
		g := "nil"
		if ok {
			g = fmt.Sprint(gen)
		}
		return "Progressing", "waiting for the controller to act on generation " + g
	}
	return "Progressing", "waiting for the Latchkey controller"
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// luaHealth runs the shipped script on obj with lua5.4, the way Argo CD does (obj global, the
// script's return value is the health). ok is false when lua5.4 is not installed; under CI it
// must be (.ci/run installs it).
func luaHealth(t *testing.T, obj map[string]any) (status, message string, ok bool) {
	t.Helper()
	lua, err := exec.LookPath("lua5.4")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("lua5.4 is not installed; .ci/run installs it")
		}
		return "", "", false
	}
	prog := "obj = " + luaValue(obj) + "\nlocal hs = dofile(" + strconv.Quote(argoHealthScript) + ")\n" +
		`io.write(hs.status, "\n", hs.message or "")`
	out, err := exec.Command(lua, "-e", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("lua5.4: %v: %s", err, out)
	}
	status, message, _ = strings.Cut(string(out), "\n")
	return status, message, true
}

// luaValue writes v, as decoded from JSON, as a Lua table constructor. Strings are quoted with
// Go's escapes, which Lua reads the same for printable ASCII, \", \\ and \n.
func luaValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case string:
		return strconv.Quote(v)
	case bool, int64, int, float64:
		return fmt.Sprint(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = luaValue(e)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = "[" + strconv.Quote(k) + "] = " + luaValue(v[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	panic(fmt.Sprintf("luaValue: %T", v))
}

// health is what Argo CD would show for obj: the Lua script's answer when lua5.4 is installed
// (checked against the Go copy), the Go copy's otherwise.
func health(t *testing.T, obj client.Object) (status, message string) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	status, message = argoHealth(u)
	if ls, lm, ok := luaHealth(t, u); ok && (ls != status || lm != message) {
		t.Errorf("health.lua says %s (%q), its Go copy %s (%q)", ls, lm, status, message)
	}
	return status, message
}

func TestArgoCDHealthScript(t *testing.T) {
	cond := func(typ, status, reason, message string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": message}
	}
	object := func(gen, observed int64, conds ...map[string]any) map[string]any {
		list := make([]any, len(conds))
		for i, c := range conds {
			list[i] = c
		}
		return map[string]any{
			"metadata": map[string]any{"name": "proj", "generation": gen},
			"status":   map[string]any{"observedGeneration": observed, "conditions": list},
		}
	}
	ready := cond("Ready", "True", "Ready", "serving at https://id.example.com/ns/proj")
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"no status", map[string]any{"metadata": map[string]any{"generation": int64(1)}}, "Progressing"},
		{"no conditions", map[string]any{"metadata": map[string]any{"generation": int64(1)}, "status": map[string]any{}}, "Progressing"},
		{"ready", object(2, 2, ready), "Healthy"},
		{"ready and complete", object(2, 2, ready, cond("Degraded", "False", "Complete", "all usable")), "Healthy"},
		{"ready, newer spec not acted on", object(3, 2, ready), "Progressing"},
		{"ready unknown", object(1, 1, cond("Ready", "Unknown", "Reconciling", "")), "Progressing"},
		{"not serving", object(1, 1, cond("Ready", "False", "ProjectNotFound", "Project ns/p not found")), "Degraded"},
		{"not serving, newer spec", object(2, 1, cond("Ready", "False", "NotAllowed", "no")), "Degraded"},
		{"serving with a feature off", object(1, 1, ready,
			cond("Degraded", "True", "SecretMissing", `Secret ns/sink (spec.eventSinks[0]) not found; serving without event sink "siem"`)), "Degraded"},
		{"degraded without a message", object(1, 1, ready, map[string]any{"type": "Degraded", "status": "True"}), "Degraded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, message := argoHealth(tc.obj)
			if status != tc.want {
				t.Errorf("Go copy says %s (%q), want %s", status, message, tc.want)
			}
			ls, lm, ok := luaHealth(t, tc.obj)
			if !ok {
				t.Skip("lua5.4 not installed; the Go copy was checked")
			}
			if ls != status || lm != message {
				t.Errorf("health.lua says %s (%q), its Go copy %s (%q)", ls, lm, status, message)
			}
		})
	}
}
