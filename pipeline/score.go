package pipeline

import (
	"context"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/scoring"
)

// ScoreOptions configure Score: package scoring's options, and the model
// that teacher-forces records without log-probs.
type ScoreOptions struct {
	scoring.Options
	// Model, when set (and TeacherForce is not), teacher-forces records
	// that came without log-probs through this model.
	Model *Model
}

// NewScoreOptions takes the scoring tables of a config.
func NewScoreOptions(cfg Config, in, out string) ScoreOptions {
	return ScoreOptions{Options: scoring.Options{In: in, Out: out, Verifier: cfg.Verifier, Confidence: cfg.Confidence, Reward: cfg.Reward, Advantage: cfg.Advantage}}
}

// Score verifies a file of rollouts and computes each completion's
// confidence, reward and advantage (scoring.Score), teacher-forcing the
// records without log-probs through opts.Model when it is set.
func Score(ctx context.Context, opts ScoreOptions) (scoring.Summary, error) {
	tf, err := opts.teacherForceHook()
	if err != nil {
		return scoring.Summary{}, err
	}
	opts.TeacherForce = tf
	if m := opts.Model; m != nil && m.llm != nil {
		opts.RenderChat = func(msgs []dataset.Message, prompt string) (string, error) {
			return rollout.RenderChat(m.llm, m.cfg.ChatTemplate, msgs, prompt)
		}
	}
	return scoring.Score(ctx, opts.Options)
}

// teacherForceHook is ScoreOptions.TeacherForce, or the model's teacher
// forcing when the options name a Model instead.
func (o *ScoreOptions) teacherForceHook() (func(context.Context, []*dataset.Rollout) error, error) {
	if o.TeacherForce != nil || o.Model == nil {
		return o.TeacherForce, nil
	}
	cfg := DefaultConfig()
	cfg.Model = o.Model.cfg
	return o.Model.TeacherForcer(cfg)
}
