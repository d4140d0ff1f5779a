package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/confclip/confclip/experiments"
	"github.com/confclip/confclip/pipeline"
)

// renderer turns the pipeline's progress events into lines on stderr:
// rewritten in place on a terminal, a plain line every few seconds (and at
// every step's end) otherwise.
type renderer struct {
	w       io.Writer
	tty     bool
	last    time.Time
	pending bool // a live line is on the screen
}

func newRenderer(w io.Writer) *renderer {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &renderer{w: w, tty: tty}
}

// live shows a line that the next one replaces; off a terminal, at most one
// every five seconds unless final.
func (r *renderer) live(line string, final bool) {
	now := time.Now()
	if r.tty {
		fmt.Fprintf(r.w, "\r\033[K%s", line)
		r.pending = true
		if final {
			r.end()
		}
		return
	}
	if final || now.Sub(r.last) >= 5*time.Second {
		fmt.Fprintln(r.w, line)
		r.last = now
	}
}

// line prints a line that stays.
func (r *renderer) line(s string) {
	if r.tty && r.pending {
		fmt.Fprint(r.w, "\r\033[K")
		r.pending = false
	}
	fmt.Fprintln(r.w, s)
}

// clear removes a live line from the terminal.
func (r *renderer) clear() {
	if r.tty && r.pending {
		fmt.Fprint(r.w, "\r\033[K")
		r.pending = false
	}
}

// end finishes a live line.
func (r *renderer) end() {
	if r.pending {
		fmt.Fprintln(r.w)
		r.pending = false
	}
}

func (r *renderer) event(e pipeline.Event) {
	switch e := e.(type) {
	case pipeline.RolloutProgress:
		r.live(fmt.Sprintf("rollout: %d/%d groups, %.1f tokens/s, ETA %s", e.Groups, e.Total, e.TokensPerSecond(), e.ETA().Round(time.Second)), e.Groups == e.Total)
	case pipeline.TeacherForceProgress:
		r.live(fmt.Sprintf("logprobs: %d/%d records", e.Records, e.Total), e.Records == e.Total)
	case pipeline.TrainProgress:
		st := e.Stats
		clipped := ""
		if st.Clipped {
			clipped = " (clipped)"
		}
		eta := time.Duration(float64(e.Elapsed) / float64(e.Step) * float64(e.Steps-e.Step))
		left := ""
		if st.ZeroWeight > 0 {
			left = fmt.Sprintf(" (%d with zero weight left out)", st.ZeroWeight)
		}
		shared := ""
		if st.SharedTokens > 0 {
			shared = fmt.Sprintf(" (%d shared prompt tokens computed once)", st.SharedTokens)
		}
		r.live(fmt.Sprintf("step %d/%d: loss %.5f, grad norm %.4g%s, %d sequences%s, %d tokens%s, %.0f tokens/s, ETA %s",
			e.Step, e.Steps, st.Loss, st.GradNorm, clipped, st.Sequences, left, st.AllTokens, shared, st.TokensPerSec, eta.Round(time.Second)), true)
	case pipeline.EvalProgress:
		where := "eval"
		if e.Steps > 0 {
			where = fmt.Sprintf("step %d/%d: held-out evaluation", e.Step, e.Steps)
		}
		// Not final: the run's step line (or eval's summary) follows.
		r.live(fmt.Sprintf("%s: %d/%d prompts (%s), ETA %s", where, e.Groups, e.Total, e.Phase, e.ETA().Round(time.Second)), false)
	case pipeline.RunStage:
		if r.tty {
			r.live(fmt.Sprintf("step %d/%d: %s", e.Step, e.Steps, e.Stage), false)
		}
	case pipeline.RunStepDone:
		m := e.Metrics
		ev := ""
		if m.EvalAccuracy != nil {
			ev = fmt.Sprintf(", held-out %.3f", *m.EvalAccuracy)
		}
		update := fmt.Sprintf("loss %.4g, grad %.3g", m.Loss, m.GradNorm)
		if m.TrainSkipped != 0 {
			update = "no update (every advantage 0)"
		}
		r.line(fmt.Sprintf("step %d/%d: accuracy %.3f%s, reward %.3f, zero-std %.2f (binary %.2f), tokens %.1f, %s, %.0f tokens/s, %.1fs, ETA %s",
			m.Step, e.Steps, m.Accuracy, ev, m.MeanReward, m.ZeroStdFrac, m.ZeroStdFracBinary, m.MeanTokens, update, m.TokensPerS, m.StepS, e.ETA.Round(time.Second)))
	case pipeline.RunNote:
		r.line(e.Text)
	case experiments.ArmRun:
		start := ""
		if e.Start != "" {
			start = "start " + e.Start + ", "
		}
		r.line(fmt.Sprintf("== %s%s, seed %d -> %s", start, e.Arm, e.Seed, e.Dir))
	}
}

// wasWere is the verb for n things.
func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}
