package verifiers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The command checker does not run as confclip's child: confclip starts
// itself again as a small supervisor (the process named by
// os.Executable, in any program that links this package), and the
// supervisor starts the checker. So the checker's parent ($PPID) is the
// supervisor: stopping or killing it does not stop or kill confclip, whose
// own timeout still runs. On Linux the supervisor is a child subreaper:
// every descendant that the checker orphans (a double fork, setsid, a
// cleared environment) becomes the supervisor's child, and is killed when
// the checker exits or the supervisor is told to stop (SIGTERM).

// supervisorEnv marks the supervisor process; its value is the checker's
// argv count, the argv follows in os.Args.
const supervisorEnv = "CONFCLIP_CHECKER_SUPERVISOR"

func init() {
	if os.Getenv(supervisorEnv) == "1" {
		os.Exit(supervise(os.Args[1:]))
	}
}

// supervise runs argv (the limit wrapper and the checker) and returns its
// exit status, after killing every process left under the supervisor.
func supervise(argv []string) int {
	if err := os.Unsetenv(supervisorEnv); err != nil {
		fmt.Fprintln(os.Stderr, "confclip checker supervisor:", err)
		return 126
	}
	if err := becomeSubreaper(); err != nil {
		// Without it, a checker's escaped grandchild is not reparented
		// here: killTree's process-group kill is what remains.
		fmt.Fprintln(os.Stderr, "confclip checker supervisor: not a subreaper:", err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "confclip checker supervisor:", err)
		return 126
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status, exited := 0, false
	select {
	case err := <-done:
		exited = true
		if ee, ok := err.(*exec.ExitError); ok {
			status = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
		} else if err != nil {
			status = 126
		}
	case <-term:
		status = 137
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	reapOrphans()
	if !exited {
		select {
		case err := <-done:
			// Killed above: an exit status is expected, anything else is not.
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				fmt.Fprintln(os.Stderr, "confclip checker supervisor: waiting for the checker:", err)
			}
		case <-time.After(time.Second):
		}
	}
	return status
}

// reapOrphans kills and reaps the supervisor's children that it did not
// start: the checker's descendants, reparented here.
func reapOrphans() {
	for range 50 {
		kids := childrenOf(os.Getpid())
		if len(kids) == 0 {
			return
		}
		for _, p := range kids {
			syscall.Kill(p, syscall.SIGSTOP)
		}
		for _, p := range kids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		for _, p := range kids {
			var ws syscall.WaitStatus
			syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil && pp == pid {
				kids = append(kids, p)
			}
		}
	}
	return kids
}

// supervisorCommand is the command that runs argv under the supervisor.
func supervisorCommand(argv []string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding confclip's own executable for the checker supervisor: %w", err)
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = []string{supervisorEnv + "=1"}
	return cmd, nil
}

// checkerEnvAllowed are the variables of confclip's environment that a
// checker sees (docs/verifiers.md); everything else (tokens, keys) is
// left out.
var checkerEnvAllowed = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "TZ", "USER", "LOGNAME"}

// checkerEnv is the checker's environment: the allowed variables of ours,
// HOME and TMPDIR its own folder, and extra.
func checkerEnv(dir string, extra ...string) []string {
	var env []string
	for _, k := range checkerEnvAllowed {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "HOME="+dir, "TMPDIR="+dir)
	return append(env, extra...)
}

// tempPattern names the checker folders: the pid of the confclip that
// made one tells, at the next start, whether it was left by a crash.
func tempPattern() string { return fmt.Sprintf("confclip-verify-%d-*", os.Getpid()) }

// cleanStaleTemps removes the checker folders of confclip processes that
// are gone (killed before they could remove them).
func cleanStaleTemps() {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), "confclip-verify-*"))
	if err != nil { // only a malformed pattern, and this one is not
		return
	}
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), "confclip-verify-")
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
}
