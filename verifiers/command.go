package verifiers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() { Register("command", newCommand) }

// commandVerifier runs an external checker (Options.Command, an argv run
// without a shell) once per completion:
//
//   - the completion is its standard input, the reference is in the
//     environment variable CONFCLIP_REFERENCE;
//   - it runs in a fresh temporary directory (also its TMPDIR), removed after;
//   - it gets Options.MemoryMB of address space and Options.CPUSeconds of
//     CPU time (set with ulimit by a fixed /bin/sh wrapper that then execs the
//     argv; no user text is interpreted by the shell), and Options.Timeout of
//     wall-clock time, after which its whole process group is killed;
//   - the score is the last line of its standard output when that is a
//     number in [0, 1]; otherwise exit status 0 scores 1 and any other 0.
//     Correct means a score of 1.
//
// A timeout is a verdict (score 0, Reason "timeout after ..."), not an
// error; a checker that is not found is an error from New.
type commandVerifier struct{ opts Options }

func newCommand(opts Options) (Verifier, error) {
	if len(opts.Command) == 0 {
		return nil, errors.New("command: set the checker's argv (verifier.command)")
	}
	// Found now rather than failing every verification later.
	if _, err := exec.LookPath(opts.Command[0]); err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	return &commandVerifier{opts: opts}, nil
}

// limitWrapper sets the resource limits and execs the checker. Arguments:
// $1 memory in KiB ("" for none), $2 CPU seconds ("" for none), then argv.
const limitWrapper = `[ -n "$1" ] && { ulimit -v "$1" || exit 125; }; [ -n "$2" ] && { ulimit -t "$2" || exit 125; }; shift 2; exec "$@"`

// maxOutput bounds what is kept of the checker's stdout and stderr.
const maxOutput = 64 << 10

// Verify implements Verifier.
func (v *commandVerifier) Verify(ctx context.Context, completion, reference string) (Result, error) {
	return guarded(ctx, v.opts, completion, reference, v.check)
}

func (v *commandVerifier) check(ctx context.Context, completion, reference string) (Result, error) {
	dir, err := os.MkdirTemp("", "confclip-verify-*")
	if err != nil {
		return noAnswer(""), fmt.Errorf("command: %w", err)
	}
	defer os.RemoveAll(dir)

	mem, cpu := "", ""
	if v.opts.MemoryMB > 0 {
		mem = strconv.Itoa(v.opts.MemoryMB * 1024)
	}
	if v.opts.CPUSeconds > 0 {
		cpu = strconv.Itoa(v.opts.CPUSeconds)
	}
	args := append([]string{"-c", limitWrapper, "confclip-limit", mem, cpu}, v.opts.Command...)
	cmd := exec.CommandContext(ctx, "/bin/sh", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CONFCLIP_REFERENCE="+reference, "TMPDIR="+dir)
	cmd.Stdin = strings.NewReader(completion)
	var stdout, stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The checker leads its own process group so that a timeout kills what
	// it started too; WaitDelay stops Wait from blocking on a pipe held open
	// by a grandchild that escaped the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second

	err = cmd.Run()
	if cmd.Process != nil {
		// Background children of a checker that exited are not left behind.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		return noAnswer(""), ctx.Err() // guarded turns its own deadline into a verdict
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return noAnswer(""), fmt.Errorf("command %q: %w", v.opts.Command[0], err)
	}
	if exitErr != nil && exitErr.ExitCode() == 125 && strings.Contains(stderr.String(), "ulimit") {
		return noAnswer(""), fmt.Errorf("command: setting resource limits: %s", strings.TrimSpace(stderr.String()))
	}

	res := noAnswer("")
	if s, ok := lastLineScore(stdout.String()); ok {
		res.Score = s
		res.Reason = fmt.Sprintf("checker printed %v", s)
	} else if err == nil {
		res.Score, res.Reason = 1, "checker exited 0"
	} else {
		res.Reason = "checker failed: " + exitErr.String()
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			res.Reason += ": " + clip(lastLine(msg), 200)
		}
	}
	res.Correct = res.Score == 1
	return res, nil
}

// lastLineScore parses the last non-blank line of out as a score in [0, 1].
func lastLineScore(out string) (float64, bool) {
	f, err := strconv.ParseFloat(lastLine(out), 64)
	return f, err == nil && f >= 0 && f <= 1
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.TrimSpace(s[strings.LastIndexByte(s, '\n')+1:])
}

// capped keeps the first maxOutput bytes written to it and drops the rest
// (without failing the writer, which would kill the checker with SIGPIPE).
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
