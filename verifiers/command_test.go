package verifiers

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone waits up to 3 s for pid to be dead (or a zombie waiting for init).
func gone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d outlived the checker", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var b []byte
	for range 100 {
		b, _ = os.ReadFile(path)
		if len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %s: %q", path, b)
	}
	return pid
}

func shOpts(script string, timeout time.Duration) Options {
	return Options{Command: []string{"/bin/sh", "-c", script}, Timeout: timeout}
}

// TestCommandOutputCapped: a checker printing without end (`yes`) costs
// at most the cap; io.Copy used to call the embedded buffer's ReadFrom and
// grow it without bound (2.1 GB in the issue).
func TestCommandOutputCapped(t *testing.T) {
	v := mustNew(t, "command", Options{Command: []string{"yes"}, Timeout: time.Second})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := v.Verify(context.Background(), "", "")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if res.Score != 0 || !strings.HasPrefix(res.Reason, "timeout") {
		t.Errorf("got %+v, want a timeout verdict", res)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 16<<20 {
		t.Fatalf("a second of `yes` allocated %d MiB (cap %d KiB)", grown>>20, maxOutput>>10)
	}
}

// TestCommandBackgroundChildHoldsPipe: a checker that answers and exits
// while a background child keeps its stdout open gets its verdict (it
// used to be an error for the whole run), promptly, and the child dies.
func TestCommandBackgroundChildHoldsPipe(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	v := mustNew(t, "command", shOpts(`sleep 60 & echo $! > `+pidFile+`; echo 1`, 10*time.Second))
	start := time.Now()
	res, err := v.Verify(context.Background(), "", "")
	if err != nil {
		t.Fatalf("a verdict was turned into an error: %v", err)
	}
	if !res.Correct || res.Score != 1 {
		t.Errorf("got %+v, want the checker's score 1", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	gone(t, readPID(t, pidFile))
}

// TestCommandTimeoutKillsEscapedGrandchild: a grandchild that left the
// process group (setsid after a double fork) is killed at the timeout too.
func TestCommandTimeoutKillsEscapedGrandchild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `( setsid sh -c 'echo $$ > ` + pidFile + `; exec sleep 60' & ) ; sleep 60`
	v := mustNew(t, "command", shOpts(script, 500*time.Millisecond))
	res, err := v.Verify(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Reason, "timeout") {
		t.Errorf("got %+v, want a timeout verdict", res)
	}
	pid := readPID(t, pidFile)
	if runtime.GOOS != "linux" {
		t.Skipf("NOT RUN: killing processes outside the group needs /proc (pid %d)", pid)
	}
	gone(t, pid)
}

// TestCommandMemoryLimitsTheTree: four processes of about 30 MiB each stay
// under a 64 MiB per-process limit but not under a 64 MiB tree limit.
func TestCommandMemoryLimitsTheTree(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("NOT RUN: the tree's memory is measured through /proc")
	}
	hog := `awk 'BEGIN { s = "x"; while (length(s) < 30000000) s = s s; system("sleep 20") }'`
	script := hog + ` & ` + hog + ` & ` + hog + ` & ` + hog + ` & wait; echo 1`
	o := shOpts(script, 15*time.Second)
	o.MemoryMB = 64
	start := time.Now()
	res, err := mustNew(t, "command", o).Verify(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Score != 0 || !strings.Contains(res.Reason, "memory limit") {
		t.Errorf("got %+v, want the tree's memory limit", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: the tree was not killed at the limit", d)
	}
}

// TestCommandRejectsNegativeLimits: a negative limit used to mean "none"
// without saying so.
func TestCommandRejectsNegativeLimits(t *testing.T) {
	for _, o := range []Options{{MemoryMB: -1}, {CPUSeconds: -5}} {
		o.Command = []string{"true"}
		if _, err := New("command", o); err == nil || !strings.Contains(err.Error(), "want 0 (none) or more") {
			t.Errorf("%+v: got %v", o, err)
		}
	}
}
