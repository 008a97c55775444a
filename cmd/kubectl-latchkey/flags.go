package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// options are the flags of every command. The kubeconfig flags (--kubeconfig, --context, -n,
// --as, --token, …) are kubectl's own, from cli-runtime, so they mean what they mean to kubectl.
type options struct {
	config        *genericclioptions.ConfigFlags
	print         *genericclioptions.PrintFlags
	allNamespaces bool
	project       string
	selector      string
	output        string
	person, email string
	follow        bool
	action        string
	actor, target string
	since         time.Duration
	interval      time.Duration
	dryRun        bool
}

func newOptions() *options {
	o := &options{
		config:   genericclioptions.NewConfigFlags(true),
		print:    genericclioptions.NewPrintFlags(""),
		interval: 2 * time.Second,
	}
	return o
}

// outputs are the -o formats the views print themselves; the others (json, yaml, jsonpath,
// go-template, …) are cli-runtime's printers.
var outputs = []string{"wide", "name"}

func (o *options) allowedOutputs() []string {
	return append(slices.Clone(outputs), o.print.AllowedFormats()...)
}

// resolveOutput reads -o into o.output: "table" (the default), "wide", "name", or a format a
// cli-runtime printer prints.
func (o *options) resolveOutput() error {
	if o.interval < 100*time.Millisecond {
		o.interval = 100 * time.Millisecond
	}
	f := ""
	if o.print.OutputFormat != nil {
		f = *o.print.OutputFormat
	}
	// --template alone means -o go-template, as in kubectl.
	if t := o.print.TemplatePrinterFlags.TemplateArgument; f == "" && t != nil && *t != "" {
		f = "go-template"
		*o.print.OutputFormat = f
	}
	if f == "" {
		o.output = "table"
		return nil
	}
	name, _, _ := strings.Cut(f, "=")
	if !slices.Contains(o.allowedOutputs(), name) {
		return fmt.Errorf("-o %q: want one of %s", f, strings.Join(o.allowedOutputs(), ", "))
	}
	o.output = f
	return nil
}

// printed reports whether -o asks for a cli-runtime printer rather than a table or names.
func (o *options) printed() bool {
	return o.output != "table" && o.output != "wide" && o.output != "name"
}
