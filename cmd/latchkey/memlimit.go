package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// cgroupLimitFiles hold a container's memory limit: cgroup v2 first, then v1.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// applyMemoryLimit gives the Go runtime a soft memory limit below the container's, unless
// GOMEMLIMIT says otherwise. Without one the heap may grow to twice what is live before a
// collection, so a burst of reconciles (a GitOps sync of thousands of OAuthClients) can take the
// process past its limit and have it killed, when collecting sooner would have been enough.
// The runtime's limit covers the memory it manages; the headroom is for what it does not (the
// binary's own pages).
func applyMemoryLimit(log logr.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit, file := containerMemoryLimit(cgroupLimitFiles)
	if limit <= 0 {
		return
	}
	soft := softLimit(limit)
	debug.SetMemoryLimit(soft)
	log.V(1).Info("Go memory limit set from the container's", "cgroupFile", file, "containerBytes", limit, "goBytes", soft)
}

// containerMemoryLimit returns the first limit found in files, or 0 when there is none ("max",
// a v1 "unlimited" value near 2^63, or no cgroup files at all).
func containerMemoryLimit(files []string) (int64, string) {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, f
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, f
		}
		return n, f
	}
	return 0, ""
}

// softLimit leaves a tenth of the container's limit, and at least 32 MiB, outside the Go
// runtime's: measured, the binary's own pages and what the runtime does not count come to about
// 35 MiB of resident memory. Never less than half the limit.
func softLimit(limit int64) int64 {
	headroom := max(limit/10, 32<<20)
	return max(limit-headroom, limit/2)
}
