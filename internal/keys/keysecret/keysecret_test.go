package keysecret_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/oauth2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/keys/keysecret"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/internal/upstream"
)

var (
	k8s        client.Client
	skipReason string
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		skipReason = testenv.ShortReason("a kube-apiserver and etcd (envtest)")
		return m.Run()
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		msg := "KUBEBUILDER_ASSETS is not set: run hack/control-plane.sh and export KUBEBUILDER_ASSETS=<the directory it prints>"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: "+msg)
			return 1
		}
		skipReason = msg
		return m.Run()
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer env.Stop()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	return m.Run()
}

// namespace makes a namespace of its own for one test.
func namespace(t *testing.T) string {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "keys-"}}
	if err := k8s.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func keeper(key types.NamespacedName, clock *testclock.Clock) *keysecret.Keeper {
	return &keysecret.Keeper{Client: k8s, Secret: key, Create: true, Announce: 24 * time.Hour, Retire: 24 * time.Hour,
		RotateEvery: 90 * 24 * time.Hour, SealingAnnounce: 2 * time.Minute, Now: clock.Now, Log: logr.Discard()}
}

func read(t *testing.T, key types.NamespacedName) (*corev1.Secret, *keys.Set) {
	t.Helper()
	var sec corev1.Secret
	if err := k8s.Get(t.Context(), key, &sec); err != nil {
		t.Fatal(err)
	}
	set, err := keys.Parse(sec.Data)
	if err != nil {
		t.Fatal(err)
	}
	return &sec, set
}

// Replicas starting together all find the Secret missing and all try to create it: exactly
// one creation wins and every replica then uses that one. Once present it is never replaced.
func TestKeeperCreatesTheSecretOnce(t *testing.T) {
	ns := namespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "latchkey-keys"}
	clock := testclock.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- keeper(key, clock).Step(t.Context()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var list corev1.SecretList
	if err := k8s.List(t.Context(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("%d Secrets (%v), want one", len(list.Items), err)
	}
	sec, set := read(t, key)
	if len(set.Sealing) != 1 || len(set.Signing) != 1 || len(sec.OwnerReferences) != 0 {
		t.Fatalf("created %+v, owners %v", set, sec.OwnerReferences)
	}
	// Later starts change nothing: nothing is due.
	clock.Advance(time.Hour)
	for range 3 {
		if err := keeper(key, clock).Step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := read(t, key)
	if again.ResourceVersion != sec.ResourceVersion {
		t.Errorf("the Secret was rewritten with nothing due: %v", again.Data)
	}
}

// A Secret an admin or an earlier chart made keeps every sealing key byte for byte; the
// Keeper only adds its signing key and state. Without Create it waits rather than make one.
func TestKeeperKeepsAnExistingSecret(t *testing.T) {
	ns := namespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "own-keys"}
	clock := testclock.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	k := keeper(key, clock)
	k.Create = false
	if err := k.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	var sec corev1.Secret
	if err := k8s.Get(t.Context(), key, &sec); err == nil {
		t.Fatal("created the Secret although creating is off")
	}
	raw := []byte("0123456789abcdef0123456789abcdef")
	sec = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}, Data: map[string][]byte{"2026-11": raw}}
	if err := k8s.Create(t.Context(), &sec); err != nil {
		t.Fatal(err)
	}
	if err := k.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, set := read(t, key)
	if !bytes.Equal(got.Data["2026-11"], raw) || set.PrimarySealing(clock.Now()) != "2026-11" || len(set.Signing) != 1 {
		t.Fatalf("existing key changed or no signing key added: %+v", set)
	}
}

// TestLoaderFollowsRotation: a replica that is not the leader waits for the Secret, then
// follows a sealing rotation: it holds the new key first and seals with it only after the
// announce period, as every other replica does.
func TestLoaderFollowsRotation(t *testing.T) {
	ns := namespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "latchkey-keys"}
	clock := testclock.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	kr := &secret.Keyring{}
	changed := make(chan struct{}, 16)
	l := keysecret.NewLoader()
	l.Reader, l.Secret, l.Keyring, l.Signing, l.Now, l.Poll, l.Log = k8s, key, kr, &keys.Signing{}, clock.Now, 20*time.Millisecond, logr.Discard()
	l.Changed = func() { changed <- struct{}{} }
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go l.Start(ctx)
	time.Sleep(100 * time.Millisecond)
	if l.Ready(ctx) == nil {
		t.Fatal("ready without a keys Secret")
	}
	k := keeper(key, clock)
	if err := k.Step(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := l.WaitLoaded(wctx); err != nil {
		t.Fatal(err)
	}
	old := kr.PrimaryID()

	sec, _ := read(t, key)
	sec.Annotations = map[string]string{keys.RotateSealingAnnotation: "1"}
	if err := k8s.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if err := k.Step(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return len(kr.IDs()) == 2 })
	if kr.PrimaryID() != old {
		t.Fatal("the new sealing key seals before every replica has had time to load it")
	}
	clock.Advance(2 * time.Minute)
	eventually(t, func() bool { return kr.PrimaryID() != old })
	// The same annotation value does not rotate again.
	if err := k.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if _, set := read(t, key); len(set.Sealing) != 2 {
		t.Errorf("%d sealing keys after stepping again", len(set.Sealing))
	}
}

func eventually(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// interrupting stops the re-seal after its first page, as a leader that loses its Lease does.
type interrupting struct {
	keys.ResealStore
	cancel func()
	pages  int
}

func (s *interrupting) ConnectionsSealedWithout(ctx context.Context, keyID, afterID string, limit int) ([]store.Connection, error) {
	s.pages++
	if s.pages == 2 {
		s.cancel()
		return nil, context.Canceled
	}
	return s.ResealStore.ConnectionsSealedWithout(ctx, keyID, afterID, limit)
}

// TestReseal: after a sealing rotation the elected replica re-seals every stored connection
// with the new key, page by page, reporting progress on the Secret; a re-seal interrupted by a
// change of leader resumes where it stopped; once it is done the old key can be removed and
// every connection still opens with the new key alone.
func TestReseal(t *testing.T) {
	ns := namespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "latchkey-keys"}
	clock := testclock.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st, err := sqlstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := keeper(key, clock).Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, set := read(t, key)
	oldID := set.PrimarySealing(clock.Now())
	oldRing, err := secret.NewKeyring(set.Sealing, oldID)
	if err != nil {
		t.Fatal(err)
	}
	const n = 25
	sealer := &upstream.Vault{Store: st, Keyring: oldRing, Now: clock.Now}
	for i := range n {
		c := store.Connection{ID: fmt.Sprintf("conn-%02d", i), Project: "team/demo", Subject: fmt.Sprintf("person-%d", i),
			Connector: "team/github", AccountID: "1", AccountName: "someone", CreatedAt: clock.Now(), UpdatedAt: clock.Now()}
		sealer.Seal(&c, &oauth2.Token{AccessToken: fmt.Sprintf("gho_access_%d", i), RefreshToken: "ghr_refresh", TokenType: "bearer"})
		if _, err := st.SaveConnection(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}

	// Rotate: the new key is announced, then becomes primary and the re-seal starts.
	sec, _ := read(t, key)
	sec.Annotations = map[string]string{keys.RotateSealingAnnotation: "2026-12-01"}
	if err := k8s.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	if err := keeper(key, clock).Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Minute)

	// The first leader re-seals one page of ten and loses its Lease.
	ctx, cancel := context.WithCancel(t.Context())
	first := keeper(key, clock)
	first.Reseal = &keysecret.Resealer{Store: &interrupting{ResealStore: st, cancel: cancel}, Batch: 10, Pause: time.Millisecond, Log: logr.Discard()}
	if err := first.Step(ctx); err == nil {
		t.Fatal("the interrupted re-seal reported no error")
	}
	sec, set = read(t, key)
	newID := set.State.SealingPrimary
	if r := set.State.Reseal; newID == oldID || r == nil || r.To != newID || r.Resealed != 10 || r.After != "conn-09" || !r.DoneAt.IsZero() {
		t.Fatalf("progress after one page: %+v", r)
	}
	if note := sec.Annotations[keys.ResealAnnotation]; !strings.HasPrefix(note, "running: 10 connections") {
		t.Errorf("progress annotation %q", note)
	}

	// The next leader resumes after conn-09 and finishes.
	next := keeper(key, clock)
	next.Reseal = &keysecret.Resealer{Store: st, Batch: 10, Pause: time.Millisecond, Log: logr.Discard()}
	if err := next.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	sec, set = read(t, key)
	if r := set.State.Reseal; r.Resealed != n || r.DoneAt.IsZero() || r.Unreadable != 0 {
		t.Fatalf("done: %+v (a resumed re-seal must not count a row twice)", r)
	}
	if note := sec.Annotations[keys.ResealAnnotation]; !strings.HasPrefix(note, fmt.Sprintf("done: %d connections re-sealed with key %s", n, newID)) ||
		!strings.Contains(note, "no other key seals anything stored") {
		t.Errorf("done annotation %q", note)
	}
	counts, err := st.SealedValueCounts(t.Context())
	if err != nil || !maps(counts, map[string]int64{newID: n}) {
		t.Fatalf("sealed value counts %v %v", counts, err)
	}

	// The admin removes the old key; every connection opens with the new key alone.
	delete(sec.Data, oldID)
	if err := k8s.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	_, set = read(t, key)
	if _, ok := set.Sealing[oldID]; ok || len(set.Sealing) != 1 {
		t.Fatalf("sealing keys %v", slices.Collect(func(yield func(string) bool) {
			for id := range set.Sealing {
				yield(id)
			}
		}))
	}
	newRing, err := secret.NewKeyring(set.Sealing, "")
	if err != nil {
		t.Fatal(err)
	}
	opener := &upstream.Vault{Store: st, Keyring: newRing, Now: clock.Now}
	for i := range n {
		tok, err := opener.Token(t.Context(), &config.Connector{Key: "team/github"}, "team/demo", fmt.Sprintf("conn-%02d", i))
		if err != nil || tok.AccessToken != fmt.Sprintf("gho_access_%d", i) {
			t.Fatalf("connection %d with the new key alone: %v %v", i, tok, err)
		}
	}
	// And without the re-seal it would not have: the old keyring no longer opens them.
	if _, err := (&upstream.Vault{Store: st, Keyring: oldRing, Now: clock.Now}).Token(t.Context(), &config.Connector{Key: "team/github"}, "team/demo", "conn-00"); err == nil {
		t.Error("a re-sealed connection still opens with the old key")
	}
}

func maps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestKeeperSigningSchedule: the elected replica makes a new signing key every RotateEvery
// (not while one is still announced), acts once on each value of the rotate annotation, and
// deletes a replaced key from the Secret once its retire period is over.
func TestKeeperSigningSchedule(t *testing.T) {
	ns := namespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "latchkey-keys"}
	clock := testclock.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	k := keeper(key, clock)
	step := func() *keys.Set {
		t.Helper()
		if err := k.Step(t.Context()); err != nil {
			t.Fatal(err)
		}
		_, set := read(t, key)
		return set
	}
	first := step().Signing[0].ID
	clock.Advance(90*24*time.Hour - time.Minute)
	if n := len(step().Signing); n != 1 {
		t.Fatalf("%d signing keys before the rotation is due", n)
	}
	clock.Advance(time.Minute)
	set := step()
	if len(set.Signing) != 2 || !set.Signing[1].ActiveAt.Equal(clock.Now().Add(24*time.Hour)) {
		t.Fatalf("scheduled rotation: %+v", set.Signing)
	}
	second := set.Signing[1].ID

	// Asked for during the announce period: one more key, once per annotation value.
	sec, _ := read(t, key)
	sec.Annotations = map[string]string{keys.RotateSigningAnnotation: "now"}
	if err := k8s.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	step()
	if n := len(step().Signing); n != 3 {
		t.Fatalf("%d signing keys after one request stepped twice, want 3", n)
	}
	// The first key retires when the second signs and leaves 24h later; the second, replaced an
	// hour after it started signing, leaves 24h after that.
	clock.Advance(23*time.Hour + 24*time.Hour - time.Minute)
	if set := step(); set.Signing[0].ID != first {
		t.Fatal("the first key left before its retire period ended")
	}
	clock.Advance(time.Minute)
	set = step()
	if len(set.Signing) != 2 || set.Signing[0].ID != second {
		t.Fatalf("after the first key's retire period: %v", set.Signing)
	}
}
