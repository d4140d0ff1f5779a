package verifiers

import (
	"context"
	"os"
	"os/exec"
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
	return Options{Command: []string{"/bin/sh", "-c", script}, TimeoutMS: int(timeout.Milliseconds())}
}

// TestCommandOutputCapped: a checker printing without end (`yes`) costs
// at most the cap; io.Copy used to call the embedded buffer's ReadFrom and
// grow it without bound (2.1 GB in the issue).
func TestCommandOutputCapped(t *testing.T) {
	v := mustNew(t, "command", Options{Command: []string{"yes"}, TimeoutMS: 1000})
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

// TestCommandCannotTouchConfclip: issue 23's checkers. The checker's
// parent is a supervisor, not this process: stopping it (SIGSTOP) ends in
// a timeout verdict rather than a frozen confclip, killing it (SIGKILL)
// in a failed check with the checker's folder removed.
func TestCommandCannotTouchConfclip(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	// The limit is 1 s where the verdict is the timeout; elsewhere it is
	// generous, since the supervisor is this test binary started again (slow
	// to start under -race on a loaded machine).
	cases := []struct {
		name, script, reason string
		limit                time.Duration
	}{
		{"parent is not confclip", `[ "$PPID" != ` + me + ` ] && echo 1 || echo 0`, "checker printed 1", 20 * time.Second},
		{"SIGSTOP to the parent", `kill -STOP $PPID; echo 1`, "timeout", time.Second},
		{"SIGKILL to the parent", `kill -9 $PPID; sleep 1; echo 1`, "checker failed: signal: killed", 20 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPattern()))
			v := mustNew(t, "command", shOpts(c.script, c.limit))
			start := time.Now()
			res, err := v.Verify(context.Background(), "", "")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.Reason, c.reason) {
				t.Errorf("got %+v, want reason %q", res, c.reason)
			}
			if d := time.Since(start); d > c.limit+4*time.Second {
				t.Errorf("took %v for a %v timeout", d, c.limit)
			}
			if after, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPattern())); len(after) > len(before) {
				t.Errorf("checker folders left: %v", after)
			}
		})
	}
}

// TestCommandEscapedChildWithClearedEnv: a setsid'd grandchild with an
// empty environment (no tag to find it by) is killed when the checker
// exits and at the timeout: the supervisor is its subreaper.
func TestCommandEscapedChildWithClearedEnv(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("NOT RUN: the supervisor is a subreaper on Linux only")
	}
	for _, tail := range []string{"echo 1", "sleep 60"} {
		pidFile := filepath.Join(t.TempDir(), "pid")
		script := `( setsid env -i /bin/sh -c 'echo $$ > ` + pidFile + `; exec sleep 60' & ) ; sleep 0.2; ` + tail
		v := mustNew(t, "command", shOpts(script, 2*time.Second))
		if _, err := v.Verify(context.Background(), "", ""); err != nil {
			t.Fatal(err)
		}
		gone(t, readPID(t, pidFile))
	}
}

// TestCommandEnvironment: the checker sees the allow-list (PATH), its own
// folder as HOME, TMPDIR and working folder, and not confclip's secrets.
func TestCommandEnvironment(t *testing.T) {
	t.Setenv("SECRET_TOKEN", "hunter2")
	script := `[ -z "$SECRET_TOKEN" ] && [ -n "$PATH" ] && [ "$HOME" = "$TMPDIR" ] && [ "$(pwd -P)" = "$(cd "$TMPDIR" && pwd -P)" ] && [ -n "$CONFCLIP_REFERENCE" ]`
	v := mustNew(t, "command", shOpts(script, 5*time.Second))
	res, err := v.Verify(context.Background(), "", "ref")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Correct {
		t.Fatalf("got %+v: the checker saw confclip's environment or not its own folder", res)
	}
}

// TestCommandCleansStaleFolders: the folders of a confclip that was killed
// are removed when a command verifier is made; a live process's stay.
func TestCommandCleansStaleFolders(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale, err := os.MkdirTemp("", "confclip-verify-"+strconv.Itoa(dead.Process.Pid)+"-*")
	if err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp("", "confclip-verify-1-*") // init never dies
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	mustNew(t, "command", shOpts("true", time.Second))
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("%s (of a process that is gone) is still there", stale)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("%s (of a live process) was removed", live)
	}
}
