package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

func TestScaleAdhoc(t *testing.T) {
	needEnv(t)
	n, _ := strconv.Atoi(os.Getenv("LATCHKEY_SCALE"))
	if n == 0 {
		t.Skip()
	}
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	start := time.Now()
	var wg sync.WaitGroup
	ch := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				oc := newClient(ns, fmt.Sprintf("c-%05d", i), v1alpha1.ProjectReference{Name: "proj"})
				if err := k8s.Create(context.Background(), oc); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		ch <- i
	}
	close(ch)
	wg.Wait()
	t.Logf("created %d in %s", n, time.Since(start))
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var list v1alpha1.OAuthClientList
		if err := k8s.List(context.Background(), &list); err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, oc := range list.Items {
			if meta.IsStatusConditionTrue(oc.Status.Conditions, "Ready") {
				ready++
			}
		}
		s := holder.Load()
		inSnap := len(s.Project(ns + "/proj").Clients)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("%s: ready %d, in snapshot %d (v%d), heap %d MiB, sys %d MiB", time.Since(start).Round(time.Second), ready, inSnap, s.Version, ms.HeapAlloc>>20, ms.Sys>>20)
		if ready >= n && inSnap >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(errors.New("timeout"))
		}
		time.Sleep(5 * time.Second)
	}
	for i := 0; i < 3; i++ {
		st := time.Now()
		snap, _, err := compile(context.Background(), compiler.cache, testPublicURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("compile of %d clients took %s", len(snap.Project(ns+"/proj").Clients), time.Since(st))
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("after GC: heap %d MiB, sys %d MiB", ms.HeapAlloc>>20, ms.Sys>>20)
	f, _ := os.Create("/tmp/heap.out")
	pprof.WriteHeapProfile(f)
	f.Close()
	_ = metav1.Now
	_ = config.Snapshot{}
}
