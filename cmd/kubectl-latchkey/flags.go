package main

import (
	"fmt"
	"strings"
	"time"
)

type options struct {
	kubeconfig, context, namespace string
	allNamespaces                  bool
	project                        string
	output                         string
	person, email                  string
	follow                         bool
	action, actor, target          string
	since                          time.Duration
	interval                       time.Duration
	dryRun                         bool
	help                           bool
}

// parse reads flags anywhere among the arguments (kubectl style: `revoke person alice -n
// team-a`) and returns the positional ones.
func parse(args []string) (*options, []string, error) {
	o := &options{output: "table", interval: 2 * time.Second}
	strs := map[string]*string{
		"kubeconfig": &o.kubeconfig, "context": &o.context, "namespace": &o.namespace, "n": &o.namespace,
		"project": &o.project, "output": &o.output, "o": &o.output, "person": &o.person, "email": &o.email,
		"action": &o.action, "actor": &o.actor, "target": &o.target,
	}
	durs := map[string]*time.Duration{"since": &o.since, "interval": &o.interval}
	bools := map[string]*bool{"all-namespaces": &o.allNamespaces, "A": &o.allNamespaces, "follow": &o.follow, "f": &o.follow,
		"dry-run": &o.dryRun, "help": &o.help, "h": &o.help}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if b, ok := bools[name]; ok {
			*b = !hasValue || value == "true"
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("flag %s needs a value", a)
			}
			i++
			value = args[i]
		}
		if s, ok := strs[name]; ok {
			*s = value
			continue
		}
		if d, ok := durs[name]; ok {
			v, err := time.ParseDuration(value)
			if err != nil || v < 0 {
				return nil, nil, fmt.Errorf("flag %s: %q is not a duration (like 30m or 2h)", a, value)
			}
			*d = v
			continue
		}
		return nil, nil, fmt.Errorf("unknown flag %s", a)
	}
	switch o.output {
	case "table", "wide", "json", "yaml", "name":
	default:
		return nil, nil, fmt.Errorf("-o %q: want wide, json, yaml or name", o.output)
	}
	if o.interval < 100*time.Millisecond {
		o.interval = 100 * time.Millisecond
	}
	return o, pos, nil
}
