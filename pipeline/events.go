package pipeline

import (
	"time"

	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/train"
)

// Event is a progress report of a long stage. Stages call their options'
// Progress function with one of the types below; only a user interface turns
// them into text (the command line's renderer is in cmd/confclip).
type Event interface{ isEvent() }

// RolloutProgress is sent after each group a rollout writes.
type RolloutProgress struct {
	Groups  int // groups written by this call
	Total   int // groups this call has to write
	Tokens  int // completion tokens sampled by this call
	Elapsed time.Duration
}

// ETA is the time left at the rate so far (0 before the first group).
func (p RolloutProgress) ETA() time.Duration {
	if p.Groups == 0 {
		return 0
	}
	return time.Duration(float64(p.Elapsed) / float64(p.Groups) * float64(p.Total-p.Groups))
}

// TokensPerSecond is the completion token rate so far.
func (p RolloutProgress) TokensPerSecond() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Tokens) / p.Elapsed.Seconds()
}

// TeacherForceProgress is sent after each chunk of records is teacher-forced.
type TeacherForceProgress struct {
	Records int // records done
	Total   int
}

// TrainProgress is sent after each optimiser step of Train (and Pretrain).
type TrainProgress struct {
	Step, Steps int
	Stats       train.StepStats
	Elapsed     time.Duration
}

// EvalProgress is sent after each group of a held-out evaluation writes:
// the greedy completions (Phase "greedy", one per prompt), then, with
// samples asked for, the sampled groups (Phase "sampled").
type EvalProgress struct {
	Step    int // the run's step (0 before training)
	Steps   int // the run's steps; 0 outside a run (eval)
	Phase   string
	Groups  int // prompts done in this phase (generated, or refused as bad)
	Total   int // prompts to do
	Elapsed time.Duration
}

// ETA is the phase's time left at the rate so far (0 before the first group).
func (p EvalProgress) ETA() time.Duration {
	return RolloutProgress{Groups: p.Groups, Total: p.Total, Elapsed: p.Elapsed}.ETA()
}

// RunStage says which stage a step of the run loop has entered ("rollout",
// "scoring", "training", "held-out evaluation").
type RunStage struct {
	Step, Steps int
	Stage       string
}

// RunStepDone is sent when a step of the run loop has been checkpointed.
type RunStepDone struct {
	Steps   int
	Metrics metrics.Step
	ETA     time.Duration
}

// RunNote is a one-line remark of the run loop (an evaluation before
// training, a resume).
type RunNote struct{ Text string }

// EventBase makes a type of another package an Event: a package whose
// stages run pipeline's and report through the same Progress function
// (experiments) embeds it in its own events.
type EventBase struct{}

func (EventBase) isEvent()            {}
func (RolloutProgress) isEvent()      {}
func (TeacherForceProgress) isEvent() {}
func (TrainProgress) isEvent()        {}
func (EvalProgress) isEvent()         {}
func (RunStage) isEvent()             {}
func (RunStepDone) isEvent()          {}
func (RunNote) isEvent()              {}

// emit calls f with e when f is set.
func emit(f func(Event), e Event) {
	if f != nil {
		f(e)
	}
}

// TrainEvents adapts a Progress function of Event to the per-step callback
// of TrainOptions and PretrainOptions, sending TrainProgress.
func TrainEvents(steps int, f func(Event)) func(step int, st train.StepStats) {
	start := time.Now()
	return func(step int, st train.StepStats) {
		emit(f, TrainProgress{Step: step, Steps: steps, Stats: st, Elapsed: time.Since(start)})
	}
}
