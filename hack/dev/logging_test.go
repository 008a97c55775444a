package main

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// envtest logs through controller-runtime; `make run` must have set its logger before the
// control plane starts, so a warning arrives as a line and no "log.SetLogger(...) was never
// called" stack trace is printed. Progress lines stay out of the way of this command's own.
func TestLoggersAreSet(t *testing.T) {
	var buf bytes.Buffer
	setLoggers(&buf)
	ctrllog.Log.WithName("test-env").Info("starting control plane")
	ctrllog.Log.WithName("test-env").Error(nil, "kube-apiserver exited")
	klog.Background().Error(nil, "client-go trouble")
	out := buf.String()
	if strings.Contains(out, "starting control plane") {
		t.Errorf("an info line reached the terminal:\n%s", out)
	}
	for _, want := range []string{"kube-apiserver exited", "logger=test-env", "client-go trouble"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
