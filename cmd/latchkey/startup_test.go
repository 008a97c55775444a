package main

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"latchkey.dev/latchkey/test/stack"
)

// runAsLatchkey makes the test binary run main() when a test starts it again with this
// variable set, so the tests below see the real command line and start-up, as an admin does.
const runAsLatchkey = "LATCHKEY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsLatchkey) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func latchkey(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runAsLatchkey+"=1"), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// Both spellings an admin types print the version linked in by `make build` and `make image`.
func TestVersionFlag(t *testing.T) {
	for _, flag := range []string{"--version", "-version"} {
		t.Run(flag, func(t *testing.T) {
			out, errOut, err := latchkey(t, nil, flag)
			if err != nil {
				t.Fatalf("latchkey %s: %v\n%s", flag, err, errOut)
			}
			if want := "latchkey " + version + "\n"; out != want {
				t.Errorf("latchkey %s printed %q, want %q", flag, out, want)
			}
		})
	}
}

// controller-runtime and client-go log through the logger set from --log-level and
// --log-format. Without it, controller-runtime drops their lines and, after 30 seconds, prints a
// "log.SetLogger(...) was never called" warning with a stack trace in their place.
func TestLoggersAreSet(t *testing.T) {
	var buf bytes.Buffer
	setLoggers(logr.FromSlogHandler(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { setLoggers(logr.Discard()) })

	ctrllog.Log.WithName("manager").Info("controller-runtime line")
	klog.Background().Info("client-go line")
	for _, want := range []string{`"msg":"controller-runtime line"`, `"logger":"manager"`, `"msg":"client-go line"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log output lacks %s:\n%s", want, buf.String())
		}
	}
}

// A start that fails (here: no cluster to talk to) says why in one structured line, with no
// stack trace from a logger set too late.
func TestStartupOutput(t *testing.T) {
	_, errOut, err := latchkey(t, []string{"KUBECONFIG=" + t.TempDir() + "/none", "KUBERNETES_SERVICE_HOST=", "HOME=" + t.TempDir()},
		"--listen=127.0.0.1:0", "--metrics-listen=0", "--database=sqlite:"+t.TempDir()+"/l.db")
	if err == nil {
		t.Fatal("latchkey started without a cluster")
	}
	for _, bad := range []string{"log.SetLogger", "goroutine ", "Detected at"} {
		if strings.Contains(errOut, bad) {
			t.Errorf("start-up output holds %q:\n%s", bad, errOut)
		}
	}
	if !strings.Contains(errOut, `"msg":"latchkey stopped"`) {
		t.Errorf("start-up output does not say why it stopped:\n%s", errOut)
	}
}

// `latchkey check-issuer`, as the chart's test Pod runs it: through the Service to a real
// server, exit 0 when the issuer answers and 1, with the reason, when it does not.
func TestCheckIssuerCommand(t *testing.T) {
	s := stack.New(t, stack.Options{DSN: "sqlite:" + t.TempDir() + "/latchkey.db"})
	service := httptest.NewServer(s.Front.Config.Handler)
	defer service.Close()

	out, errOut, err := latchkey(t, nil, "check-issuer", "--public-url="+s.Front.URL, "--via="+service.URL, stack.ProjectKey)
	if err != nil {
		t.Fatalf("check-issuer: %v\n%s%s", err, out, errOut)
	}
	if strings.Count(out, "ok   ") != 3 {
		t.Errorf("output:\n%s", out)
	}

	out, _, err = latchkey(t, nil, "check-issuer", "--public-url="+s.Front.URL, "--via="+service.URL, "team/nope")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "FAIL issuer "+s.Front.URL+"/team/nope") {
		t.Errorf("check-issuer for a missing Project: %v\n%s", err, out)
	}
	if _, _, err = latchkey(t, nil, "check-issuer"); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("check-issuer without --public-url: %v, want exit code 2", err)
	}
}
