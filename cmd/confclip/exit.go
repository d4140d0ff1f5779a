package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/pipeline"
)

// The exit statuses of every command (docs/guide.md "Exit status").
const (
	exitOK        = 0
	exitError     = 1 // the work failed: bad data, a file that cannot be read, ...
	exitUsage     = 2 // the command line or the configuration is wrong
	exitFailUnder = 3 // eval: accuracy below --fail-under
	exitInternal  = 4 // a bug: a panic, or llama.cpp killed the process
	// 128 + the signal's number when stopped by one: 130 for SIGINT, 143 for SIGTERM.
)

// exitCode is the process status for an error of run.
func exitCode(err error) int {
	var ec cli.ExitCoder
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec) && ec.ExitCode() != 0:
		return ec.ExitCode()
	case errors.Is(err, pipeline.ErrConfig), errors.Is(err, pipeline.ErrNoModel):
		return exitUsage
	}
	return exitError
}

// startFailed is supervise's answer when the child could not be started.
const startFailed = -1

// childEnv marks the process that does the work; the one above it only
// watches how it ends (supervise).
const childEnv = "CONFCLIP_SUPERVISED"

// crashFD is the child's descriptor the Go runtime writes a fatal error to
// (debug.SetCrashOutput), besides stderr.
const crashFD = 3

// runMain runs the command line in this process. The first SIGINT or
// SIGTERM cancels the context every command runs under; another one, a
// second or more later, ends the process at once (one Ctrl-C can arrive
// twice: from the terminal and from the supervisor).
func runMain(args []string, stderr io.Writer) int {
	if os.Getenv(childEnv) != "" {
		if f := os.NewFile(crashFD, "crash"); f != nil {
			if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
				fmt.Fprintln(stderr, "confclip: a crash would not be reported as one:", err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var mu sync.Mutex
	var got os.Signal
	go func() {
		first := <-sigs
		mu.Lock()
		got = first
		mu.Unlock()
		cancel()
		at := time.Now()
		for s := range sigs {
			if time.Since(at) > time.Second {
				os.Exit(signalStatus(s))
			}
		}
	}()
	err := newApp().Run(ctx, args)
	mu.Lock()
	defer mu.Unlock()
	if got != nil {
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "confclip:", err)
		} else {
			fmt.Fprintf(stderr, "confclip: stopped by %v\n", got)
		}
		return signalStatus(got)
	}
	if err != nil {
		fmt.Fprintln(stderr, "confclip:", err)
	}
	return exitCode(err)
}

func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitError
}

// supervise runs cmd (this program again, as the child that does the work)
// and turns how it ended into the exit-status table: its own status when it
// exited, 128 + N when a signal stopped it (SIGINT, SIGTERM, SIGHUP: those
// are forwarded to it), and exitInternal, saying so, when the Go runtime
// reported a fatal error (a panic) or another signal killed it (llama.cpp
// aborting on an assertion, a segmentation fault, the kernel's OOM killer).
// A Go panic alone would exit 2, the status of a usage error. When cmd
// cannot be started at all, it returns startFailed and main does the work
// in this process.
func supervise(cmd *exec.Cmd, stderr io.Writer) int {
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(stderr, "confclip:", err)
		return exitInternal
	}
	cmd.ExtraFiles = []*os.File{w} // descriptor 3 = crashFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		w.Close()
		r.Close()
		return startFailed
	}
	w.Close()
	crash := make(chan string, 1)
	go func() {
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil { // a report cut short is still a report
			b = fmt.Appendf(b, "\n(reading the crash report: %v)", err)
		}
		crash <- string(b)
	}()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	report := <-crash
	var ws syscall.WaitStatus
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		ws, _ = ee.Sys().(syscall.WaitStatus)
	} else if err != nil {
		fmt.Fprintln(stderr, "confclip:", err)
		return exitInternal
	}
	switch {
	case strings.TrimSpace(report) != "":
		fmt.Fprintln(stderr, "confclip: internal failure (a bug: please report it with the output above)")
		return exitInternal
	case ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGHUP):
		return 128 + int(ws.Signal())
	case ws.Signaled() && ws.Signal() == syscall.SIGPIPE:
		// Its output's reader went away (`confclip run --help | head`):
		// nothing failed, and a shell tool ends so without a word.
		return 128 + int(syscall.SIGPIPE)
	case ws.Signaled():
		fmt.Fprintf(stderr, "confclip: internal failure: the process was killed by %v (llama.cpp aborts so on a failed assertion; SIGKILL is often the out-of-memory killer)\n", ws.Signal())
		return exitInternal
	}
	return cmd.ProcessState.ExitCode()
}

// noSuperviseEnv, set to 1, makes the program do its work in the one
// process, without the supervising parent: a crash then exits as the
// runtime or the signal leaves it, not with status 4.
const noSuperviseEnv = "CONFCLIP_NO_SUPERVISE"

func main() {
	if os.Getenv(childEnv) != "" || os.Getenv(noSuperviseEnv) == "1" {
		os.Exit(runMain(os.Args, os.Stderr))
	}
	exe, err := os.Executable()
	if err != nil { // cannot run a child: do the work here
		os.Exit(runMain(os.Args, os.Stderr))
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), childEnv+"=1")
	status := supervise(cmd, os.Stderr)
	if status == startFailed {
		// The program cannot start itself again: under an emulator
		// (qemu-user without binfmt_misc, which runs this arm64 binary in
		// CI's cross test) /proc/self/exe names a file the kernel cannot
		// execute. Do the work here; a crash then exits as it falls.
		status = runMain(os.Args, os.Stderr)
	}
	os.Exit(status)
}
