package stack

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/testenv"
)

// Postgres is a PostgreSQL server of the test's own, in a temporary directory, that the test
// may stop and start (the shared LATCHKEY_TEST_POSTGRES_DSN one must not be touched).
type Postgres struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	as   []string // runuser prefix when running as root (initdb refuses root)
	// DSN reaches the server's postgres database.
	DSN string
}

// StartPostgres initialises and starts a server with the Debian binaries under
// /usr/lib/postgresql/*/bin. Without them the test is skipped, or fails under CI=true; under
// -short it is skipped.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	testenv.SkipShort(t, "a PostgreSQL server of its own")
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("PostgreSQL binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
		}
		t.Skip("PostgreSQL binaries not found under /usr/lib/postgresql/*/bin")
	}
	slices.SortFunc(found, func(a, b string) int { return version(a) - version(b) })
	p := &Postgres{t: t, bin: filepath.Dir(found[len(found)-1])}

	dir, err := os.MkdirTemp("", "latchkey-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() {
		_, _ = p.pgctl("stop", "-m", "immediate") // best-effort: the directory goes next either way
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user to run PostgreSQL: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.as = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := p.run(filepath.Join(p.bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.port = freePort(t)
	p.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	p.Start()
	return p
}

func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (p *Postgres) run(name string, args ...string) (string, error) {
	argv := append(append(slices.Clone(p.as), name), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

func (p *Postgres) pgctl(args ...string) (string, error) {
	return p.run(filepath.Join(p.bin, "pg_ctl"), append([]string{"-D", filepath.Join(p.dir, "data")}, args...)...)
}

// Start starts the server and waits until it accepts connections.
func (p *Postgres) Start() {
	p.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200", p.port, p.dir)
	if out, err := p.pgctl("-l", filepath.Join(p.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
		p.t.Fatalf("starting PostgreSQL: %v\n%s\n%s", err, out, log)
	}
}

// Crash stops the server the way a crash does (immediate shutdown: no checkpoint, connections
// cut; the next start replays the write-ahead log).
func (p *Postgres) Crash() {
	p.t.Helper()
	if out, err := p.pgctl("-w", "-m", "immediate", "stop"); err != nil {
		p.t.Fatalf("stopping PostgreSQL: %v\n%s", err, out)
	}
}

// Accepting reports whether the server accepts a TCP connection now.
func (p *Postgres) Accepting() bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Log is the server's log, for a failing test to show.
func (p *Postgres) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
	return strings.TrimSpace(string(b))
}
