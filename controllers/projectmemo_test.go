//go:build !latchkey_local

package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// TestProjectMemo: reconcilers reuse a compiled Project only while the Project and every Secret
// it names are unchanged; any change compiles again and is seen at once.
func TestProjectMemo(t *testing.T) {
	ctx := context.Background()
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pw := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pw", Labels: forProject()},
		Data:       map[string][]byte{"passwords.yaml": []byte("- email: alice@example.com\n  hash: " + aliceHash + "\n")},
	}
	proj := &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "proj", UID: "u1", Generation: 1},
		Spec: v1alpha1.ProjectSpec{SignIn: v1alpha1.SignIn{
			PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "passwords.yaml"},
		}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pw, proj).Build()
	memo := &projectMemo{}
	resolve := func(p *v1alpha1.Project) *projectResult {
		t.Helper()
		r := newResolver(clusterReader{c}, "https://latchkey.example")
		r.memo = memo
		pr, err := r.projectFromObject(ctx, p)
		if err != nil || pr.compiled == nil {
			t.Fatalf("resolve: %v %+v", err, pr)
		}
		return pr
	}
	people := func(pr *projectResult) int { return len(pr.compiled.SignIn.Passwords) }

	first := resolve(proj)
	if again := resolve(proj); again.compiled != first.compiled {
		t.Fatal("an unchanged Project was compiled again")
	}

	// The password file changes: compiled again, with the new person.
	if err := c.Get(ctx, client.ObjectKeyFromObject(pw), pw); err != nil {
		t.Fatal(err)
	}
	pw.Data["passwords.yaml"] = append(pw.Data["passwords.yaml"], []byte("- email: bob@example.com\n  hash: "+aliceHash+"\n")...)
	if err := c.Update(ctx, pw); err != nil {
		t.Fatal(err)
	}
	second := resolve(proj)
	if second.compiled == first.compiled || people(second) != 2 {
		t.Fatalf("after the Secret changed: %d people, same result %v", people(second), second.compiled == first.compiled)
	}

	// The Secret goes: compiled again, password sign-in off.
	if err := c.Delete(ctx, pw); err != nil {
		t.Fatal(err)
	}
	if gone := resolve(proj); !gone.compiled.SignIn.PasswordsUnavailable || gone.err == nil {
		t.Fatalf("after the Secret was deleted: %+v", gone)
	}

	// A new generation, or a Project recreated under the same name, is compiled again.
	next := proj.DeepCopy()
	next.Generation = 2
	a := resolve(next)
	if b := resolve(next); b.compiled != a.compiled {
		t.Fatal("generation 2 compiled twice")
	}
	recreated := next.DeepCopy()
	recreated.UID = "u2"
	if b := resolve(recreated); b.compiled == a.compiled {
		t.Fatal("a recreated Project reused the old one's result")
	}
	// The result carries the object it was asked about, not the one first compiled.
	if b := resolve(recreated); b.obj != recreated {
		t.Fatal("memoised result points at another Project object")
	}
}
