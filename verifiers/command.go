package verifiers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func init() { Register("command", newCommand) }

// commandVerifier runs an external checker (Options.Command, an argv run
// without a shell) once per completion:
//
//   - the completion is its standard input, the reference is in the
//     environment variable CONFCLIP_REFERENCE;
//   - it runs in a fresh temporary directory (also its HOME and TMPDIR),
//     removed after, with an environment cleared to checkerEnvAllowed;
//   - its parent is a supervisor (supervisor.go), not confclip;
//   - each of its processes gets Options.MemoryMB of address space and
//     Options.CPUSeconds of CPU time (set with ulimit by a fixed /bin/sh
//     wrapper that then execs the argv; no user text is interpreted by the
//     shell); on Linux the resident memory of all its processes together is
//     also watched and the tree killed when it passes Options.MemoryMB;
//     0 means no limit, a negative limit is an error;
//   - its whole process tree is killed at Options.TimeoutMS of wall-clock
//     time and when it exits: its process group, and on Linux every process
//     that carries its tag in the environment (which finds descendants that
//     left the group with setsid or a double fork);
//   - only the first maxOutput bytes of its stdout and stderr are kept (the
//     rest is read and dropped); a descendant that keeps the pipes open
//     cannot hold the verdict up;
//   - the score is the last line of its standard output when that is a
//     number in [0, 1]; otherwise exit status 0 scores 1 and any other 0.
//     Correct means a score of 1.
//
// A timeout or an exceeded limit is a verdict (score 0, with the reason),
// not an error; a checker that is not found is an error from New. This is
// not a sandbox: the checker runs as the user, with the user's files and
// network (see docs/verifiers.md).
type commandVerifier struct{ opts Options }

func newCommand(opts Options) (Verifier, error) {
	cleanStaleTemps()
	if len(opts.Command) == 0 {
		return nil, errors.New("command: set the checker's argv (verifier.command)")
	}
	switch {
	case opts.MemoryMB < 0:
		return nil, fmt.Errorf("command: memory limit %d MiB: want 0 (none) or more", opts.MemoryMB)
	case opts.CPUSeconds < 0:
		return nil, fmt.Errorf("command: CPU limit %d s: want 0 (none) or more", opts.CPUSeconds)
	case opts.TimeoutMS <= 0:
		return nil, fmt.Errorf("command: timeout %d ms: want a positive time limit", opts.TimeoutMS)
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

// checkerTag is the environment variable that marks a checker's processes.
const checkerTag = "CONFCLIP_CHECKER_ID"

var checkerSeq atomic.Uint64

// Verify implements Verifier.
func (v *commandVerifier) Verify(ctx context.Context, completion, reference string) (Result, error) {
	return guarded(ctx, v.opts, completion, reference, v.check)
}

func (v *commandVerifier) check(ctx context.Context, completion, reference string) (Result, error) {
	dir, err := os.MkdirTemp("", tempPattern())
	if err != nil {
		return noAnswer(""), fmt.Errorf("command: %w", err)
	}
	defer os.RemoveAll(dir)

	tag := fmt.Sprintf("%s=%d-%d", checkerTag, os.Getpid(), checkerSeq.Add(1))
	cmd, outR, errR, err := v.start(dir, completion, reference, tag)
	if err != nil {
		return noAnswer(""), err
	}
	var stdout, stderr capped
	var readers sync.WaitGroup
	readers.Add(2)
	// A read error ends the capture: the pipe closed under a killed
	// process, whose result the caller gets from Wait.
	go func() { defer readers.Done(); io.Copy(&stdout, outR) }() //nolint:errcheck // see above
	go func() { defer readers.Done(); io.Copy(&stderr, errR) }() //nolint:errcheck // see above

	pgid := cmd.Process.Pid
	overMemory, err := v.wait(ctx, cmd, tag)
	// Background descendants of a checker that exited are not left behind.
	killTree(pgid, tag)
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		// A descendant beyond our reach still holds the pipes: the verdict
		// is made from what was read.
	}
	outR.Close()
	errR.Close()

	if ctx.Err() != nil {
		return noAnswer(""), ctx.Err() // guarded turns its own deadline into a verdict
	}
	if overMemory {
		res := noAnswer(fmt.Sprintf("memory limit: the checker's processes held more than %d MiB", v.opts.MemoryMB))
		return res, nil
	}
	return v.verdict(err, stdout.String(), stderr.String())
}

// start starts the checker under the limit-setting supervisor in dir, with
// the completion on stdin and the reference in its environment; it returns
// our own pipes of its stdout and stderr (exec.Cmd would wait for its pipes
// to close, which a background descendant can put off for ever).
func (v *commandVerifier) start(dir, completion, reference, tag string) (cmd *exec.Cmd, outR, errR *os.File, err error) {
	mem, cpu := "", ""
	if v.opts.MemoryMB > 0 {
		mem = strconv.Itoa(v.opts.MemoryMB * 1024)
	}
	if v.opts.CPUSeconds > 0 {
		cpu = strconv.Itoa(v.opts.CPUSeconds)
	}
	args := append([]string{"/bin/sh", "-c", limitWrapper, "confclip-limit", mem, cpu}, v.opts.Command...)
	if cmd, err = supervisorCommand(args); err != nil {
		return nil, nil, nil, fmt.Errorf("command: %w", err)
	}
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, checkerEnv(dir, "CONFCLIP_REFERENCE="+reference, tag)...)
	cmd.Stdin = strings.NewReader(completion)
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("command: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, nil, fmt.Errorf("command: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// The supervisor leads its own process group (and puts the checker in
	// another), so that killing the group reaches what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Only stdin is exec's pipe: a descendant holding it (with the checker
	// gone, not reading) cannot hold Wait up for longer than this.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, nil, fmt.Errorf("command %q: %w", v.opts.Command[0], err)
	}
	return cmd, outR, errR, nil
}

// wait waits for the checker to exit, stopping its tree when ctx ends or
// when the tree holds more memory than the limit (overMemory).
func (v *commandVerifier) wait(ctx context.Context, cmd *exec.Cmd, tag string) (overMemory bool, err error) {
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	// stop asks the supervisor to kill the checker's tree (it may have been
	// stopped by the checker: continued first); one that does not exit
	// soon is killed with the tree.
	stop := func() error {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-waited:
			return err
		case <-time.After(time.Second):
			killTree(pgid, tag)
			return <-waited
		}
	}
	var memTick <-chan time.Time
	if v.opts.MemoryMB > 0 && haveProc() {
		t := time.NewTicker(100 * time.Millisecond) // a sweep of /proc costs milliseconds
		defer t.Stop()
		memTick = t.C
	}
	for {
		select {
		case err := <-waited:
			return false, err
		case <-ctx.Done():
			return false, stop()
		case <-memTick:
			if treeRSS(tag) > int64(v.opts.MemoryMB)<<20 {
				return true, stop()
			}
		}
	}
}

// verdict reads the checker's outcome: the score its last line printed, 1
// for exit 0, else 0 with its failure; an error only when the checker
// could not run as one.
func (v *commandVerifier) verdict(err error, stdout, stderr string) (Result, error) {
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // the checker exited 0; its stdin was still held open
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return noAnswer(""), fmt.Errorf("command %q: %w", v.opts.Command[0], err)
	}
	if exitErr != nil && exitErr.ExitCode() == 125 && strings.Contains(stderr, "ulimit") {
		return noAnswer(""), fmt.Errorf("command: setting resource limits: %s", strings.TrimSpace(stderr))
	}
	res := noAnswer("")
	if s, ok := lastLineScore(stdout); ok {
		res.Score = s
		res.Reason = fmt.Sprintf("checker printed %v", s)
	} else if err == nil {
		res.Score, res.Reason = 1, "checker exited 0"
	} else {
		res.Reason = "checker failed: " + exitErr.String()
		if msg := strings.TrimSpace(stderr); msg != "" {
			res.Reason += ": " + clip(lastLine(msg), 200)
		}
	}
	res.Correct = res.Score == 1
	return res, nil
}

// haveProc reports whether /proc lists processes (Linux).
func haveProc() bool {
	_, err := os.Stat("/proc/self/environ")
	return err == nil
}

// taggedPIDs lists the live processes whose environment holds tag (the
// ones this user may read).
func taggedPIDs(tag string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(tag + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killTree kills the checker's process group, then every process carrying
// its tag (stopped first, so that none can fork while the others die),
// until no tagged process is left.
func killTree(pgid int, tag string) {
	syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck // a group already gone (ESRCH) is the goal
	if !haveProc() {
		return
	}
	for range 20 {
		pids := taggedPIDs(tag)
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGSTOP) //nolint:errcheck // a process already gone is the goal
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL) //nolint:errcheck // likewise
		}
		time.Sleep(time.Millisecond)
	}
}

// treeRSS is the resident memory of the tagged processes, in bytes.
func treeRSS(tag string) int64 {
	var total int64
	page := int64(os.Getpagesize())
	for _, p := range taggedPIDs(tag) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", p))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 1 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil { // a process that is gone: nothing to count
				total += n * page
			}
		}
	}
	return total
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
// It has no ReadFrom: io.Copy would use a buffer's and read without bound.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := maxOutput - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
