package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confclip/confclip/tools"
)

// asMainEnv makes the test binary run main() instead of the tests, so that
// the tests can run the program as a user does: supervisor, child, signals.
const asMainEnv = "CONFCLIP_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) != "" {
		main()
	}
	os.Exit(m.Run())
}

// program is the command line as a process (this test binary as main).
func program(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	return cmd
}

// TestSuperviseCannotStart: a child that cannot be executed (as under
// qemu-user without binfmt_misc, where /proc/self/exe is a foreign binary)
// is reported as startFailed, so main runs the work itself.
func TestSuperviseCannotStart(t *testing.T) {
	var stderr bytes.Buffer
	notExec := filepath.Join(t.TempDir(), "not-an-executable")
	if err := os.WriteFile(notExec, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0}, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := supervise(exec.Command(notExec), &stderr); got != startFailed {
		t.Errorf("supervise of a file the kernel cannot execute = %d, want startFailed (%d); stderr %q", got, startFailed, stderr.String())
	}
}

// TestSuperviseStatuses: how the child ended, through the exit-status table.
// The child is a shell standing in for the program: it exits, writes a Go
// fatal error report on descriptor 3 as the runtime would, or dies of a
// signal.
func TestSuperviseStatuses(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
		says   string
	}{
		{"exit 0", 0, ""},
		{"exit 3", 3, ""},
		{"echo 'panic: runtime error' >&3; exit 2", exitInternal, "internal failure"},
		{"kill -ABRT $$", exitInternal, "killed by aborted"},
		{"kill -SEGV $$", exitInternal, "segmentation"},
		{"kill -INT $$", 130, ""},
		{"kill -TERM $$", 143, ""},
		{"kill -PIPE $$", 141, ""},
	} {
		var stderr bytes.Buffer
		got := supervise(exec.Command("/bin/sh", "-c", tc.script), &stderr)
		if got != tc.want || !strings.Contains(strings.ToLower(stderr.String()), strings.ToLower(tc.says)) || (tc.says == "" && stderr.Len() > 0) {
			t.Errorf("%s: exit %d, want %d; said %q", tc.script, got, tc.want, stderr.String())
		}
	}
}

// TestOutputReaderGone: `confclip run --help | head -1` once printed
// "internal failure: the process was killed by broken pipe". A reader that
// went away ends the program quietly with 141, as it does a shell tool.
func TestOutputReaderGone(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first write
	cmd := program("run", "--help")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	err = cmd.Run()
	w.Close()
	if code := cmd.ProcessState.ExitCode(); code != 141 || stderr.Len() > 0 {
		t.Fatalf("help into a closed pipe: exit %d (%v), said %q; want 141 and nothing", code, err, stderr.String())
	}
}

// TestExitStatuses: usage errors (a missing required flag, a config key
// that does not exist) exit 2 on every command, and SIGINT gives 130 on
// the commands that stop cleanly (serve, run) as on the others.
func TestExitStatuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[rollout]\ntemprature = 1\n"), 0o644)
	for _, args := range [][]string{
		{"eval", "--data", "x.jsonl"},           // no -m
		{"eval", "-m", "x.gguf"},                // no --data
		{"version", "--config", bad},            // a key typo
		{"rollout", "--tmep", "1"},              // a flag typo
		{"run", "--config", bad},                // a key typo, through run
		{"score", "--in", "x", "--config", bad}, // and score
	} {
		if code, out := runOut(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, code, exitUsage, out)
		}
	}

	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "train.jsonl")
	os.WriteFile(data, []byte(`{"id":"a","prompt":"Say 1:","answer":"x"}`+"\n"), 0o644)
	cfg := filepath.Join(dir, "loop.toml")
	os.WriteFile(cfg, []byte("[model]\npath = \""+model+"\"\nctx = 64\n[data]\ntrain = \""+data+"\"\n[verifier]\nname = \"format\"\npattern = \"^\\\\s*[a-m]\"\n"+
		"[rollout]\ngroup = 2\nmax_tokens = 4\n[train]\nlora_rank = 2\nmicro_batch = 64\n[run]\nsteps = 100000\nprompts_per_step = 1\nout = \""+filepath.Join(dir, "run")+"\"\n"), 0o644)
	for _, tc := range []struct {
		args  []string
		ready string // on stderr once it works
	}{
		{[]string{"serve", "-m", model, "--port", "0"}, "serving"},
		{[]string{"run", cfg}, "step 1/"},
	} {
		cmd := program(tc.args...)
		var stderr syncBuffer
		cmd.Stderr, cmd.Stdout = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(stderr.String(), tc.ready) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Errorf("%v stopped by SIGINT: exit %d, want 130\n%s", tc.args, code, stderr.String())
		}
	}
}

// syncBuffer is a bytes.Buffer the process's output goroutine and the test
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
