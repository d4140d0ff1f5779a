// Package scoring is the score stage's work: it verifies rollouts and
// computes each completion's confidence, reward and advantage
// (docs/method.md), with the summary of a batch. pipeline.Score is the stage
// that binds it to a model (teacher forcing); package merge rebuilds a
// whole's summary with Summary.SetStats.
package scoring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/shard"
	"github.com/confclip/confclip/verifiers"
)

// Options configure Score. The four tables are those of pipeline.Config.
type Options struct {
	In  string // rollout records (JSONL)
	Out string // scored records (JSONL), written atomically; "" writes none

	Verifier   verifiers.Config
	Confidence ConfidenceConfig
	Reward     RewardConfig
	Advantage  AdvantageConfig

	// SkipBad skips bad lines, bad records and groups of the wrong size,
	// counting them in the summary, instead of stopping at the first.
	SkipBad bool
	// Workers bounds the verifications run at once; 0 means GOMAXPROCS.
	Workers int
	// TeacherForce, when set, fills Tokens, Logprobs, Entropies,
	// SelfCertainties and TokenOffsets of records that came without
	// log-probs (or self-certainties a reward reads: completions
	// produced elsewhere) by running a model over them. Without it a reward
	// that needs confidence rejects such records.
	TeacherForce func(ctx context.Context, recs []*dataset.Rollout) error
	// RenderChat, when set, renders the prompt of a chat response with the
	// model's chat template, the text teacher forcing must see
	// (pipeline.Score sets it from its Model).
	RenderChat func(messages []dataset.Message, prompt string) (string, error)
	// Prompts, when set, is the prompt file (any shape dataset.ReadPromptFile
	// reads; PromptMap names the fields of others) that OpenAI responses
	// take their prompt and answer from when they do not carry them.
	Prompts   string
	PromptMap string
	// Shard, when set, scores only the groups of one shard (package shard); a
	// malformed line, which has no prompt id, is counted by shard 0 only.
	Shard shard.Shard
}

// Summary is what Score reports about a batch; it is written as JSON.
type Summary struct {
	In      string `json:"in"`
	Out     string `json:"out,omitempty"`
	Groups  int    `json:"groups"`
	Records int    `json:"records"`
	// Shard is "K/N" for one shard's summary (Options.Shard).
	Shard string `json:"shard,omitempty"`

	Verifier            string `json:"verifier"`
	ConfidenceEstimator string `json:"confidence_estimator"`
	ConfidenceScope     string `json:"confidence_scope"`
	// ScopeFallbacks counts records scored on the whole completion because
	// the answer scope could not be applied.
	ScopeFallbacks int `json:"scope_fallbacks"`
	// TeacherForced counts records whose log-probs came from TeacherForce.
	TeacherForced int    `json:"teacher_forced"`
	Advantage     string `json:"advantage"`

	// Reward is the chosen reward; Binary is the binary baseline on the same
	// completions, side by side (compare their zero-std fractions).
	Reward   confclip.RewardStats  `json:"reward"`
	Binary   confclip.RewardStats  `json:"binary"`
	Outcomes confclip.OutcomeStats `json:"outcomes"`
	// Calibration of confidence against correctness, over the records that
	// have a confidence; nil when none has.
	Calibration *confclip.Calibration `json:"calibration,omitempty"`
	// MaskedTruncated counts advantages zeroed by advantage.mask_truncated.
	MaskedTruncated int `json:"masked_truncated"`
	// StatedMissing counts, for a reward that reads the confidence a
	// completion states (rlcr), the completions that state no valid one;
	// StatedCalibration is the calibration of the stated confidences, nil
	// when none states one.
	StatedMissing     int                   `json:"stated_confidence_missing"`
	StatedCalibration *confclip.Calibration `json:"stated_calibration,omitempty"`

	Skipped Skipped `json:"skipped"`
	Seconds float64 `json:"seconds"`
}

// Skipped counts what SkipBad left out.
type Skipped struct {
	Records int            `json:"records"` // records left out (bad, or in a bad group)
	Groups  int            `json:"groups"`  // groups left out for their size
	Reasons map[string]int `json:"reasons,omitempty"`
	// Examples are the first few messages, with file and line.
	Examples []string `json:"examples,omitempty"`
}

const maxSkipExamples = 20

// Add counts another part's skipped records and groups into s (merging
// shards' summaries), keeping the first examples.
func (s *Skipped) Add(o Skipped) {
	s.Records += o.Records
	s.Groups += o.Groups
	for k, v := range o.Reasons {
		if s.Reasons == nil {
			s.Reasons = map[string]int{}
		}
		s.Reasons[k] += v
	}
	for _, e := range o.Examples {
		if len(s.Examples) < maxSkipExamples {
			s.Examples = append(s.Examples, e)
		}
	}
}

func (s *Skipped) add(kind string, n int, err error) {
	s.Records += n
	if s.Reasons == nil {
		s.Reasons = map[string]int{}
	}
	s.Reasons[kind] += n
	if len(s.Examples) < maxSkipExamples {
		s.Examples = append(s.Examples, err.Error())
	}
}

// Reasons a record or group is bad, the keys of Skipped.Reasons.
const (
	badJSON      = "malformed line"
	badRecord    = "invalid record"
	badLogprobs  = "no log-probs"
	badVerifier  = "verifier error"
	badGroupSize = "group of unequal size"
)

// scoreRecord is one rollout on its way through Score.
type scoreRecord struct {
	rec  dataset.Rollout
	line int
	bad  error // set when the record is to be dropped
	kind string

	verifier string
	result   verifiers.Result
	format   float64
	out      *dataset.Scored
	// answerP and answerBase are, for reward answer_prob, the reference
	// answer's probability after the completion's reasoning and straight
	// after the prompt.
	answerP, answerBase float64
}

// scorer holds what Score resolved from its options.
type scorer struct {
	opts      Options
	reward    confclip.Reward
	estimator confclip.ConfidenceEstimator
	advantage confclip.AdvantageEstimator
	shaping   confclip.Shaping
	verifiers map[string]verifiers.Verifier
	// truncated are the verifiers of completions the length limit cut off
	// (verifiers.NewTruncated: math credits final-answer forms only).
	truncated  map[string]verifiers.Verifier
	format     verifiers.Verifier
	skipped    Skipped
	needLength bool
}

// Score verifies a file of rollouts and computes each completion's
// confidence, reward and advantage (docs/method.md), writing scored records
// in input order. Groups are the records of one prompt_id, in order of first
// appearance, and must all have the same size. Errors name file and line.
func Score(ctx context.Context, opts Options) (Summary, error) {
	start := time.Now()
	if err := atomicfile.NotInput(opts.Out, opts.In); err != nil {
		return Summary{}, err
	}
	s, err := newScorer(opts)
	if err != nil {
		return Summary{}, err
	}
	recs, err := s.read()
	if err != nil {
		return Summary{}, err
	}
	recs = shard.Filter(opts.Shard, recs, func(sr **scoreRecord) string { return (*sr).rec.PromptID })
	forced, err := s.teacherForce(ctx, recs)
	if err != nil {
		return Summary{}, err
	}
	if err := s.verify(ctx, recs); err != nil {
		return Summary{}, err
	}
	recs = dropBad(recs)
	if err := s.answerProbs(ctx, recs); err != nil {
		return Summary{}, err
	}
	groups, err := s.group(recs)
	if err != nil {
		return Summary{}, err
	}
	recs = dropBad(recs) // the groups of the wrong size
	// A shard may hold no prompt.
	if len(recs) == 0 && !opts.Shard.Enabled() {
		return Summary{}, fmt.Errorf("%s: no records to score", opts.In)
	}
	out, sum := s.score(recs, groups)
	sum.TeacherForced = forced
	sum.Shard = opts.Shard.String()
	if opts.Out != "" {
		if err := writeScored(opts.Out, out); err != nil {
			return Summary{}, err
		}
		// The rollout's provenance goes along, for the export.
		if b, err := os.ReadFile(dataset.ProvenancePath(opts.In)); err == nil {
			if err := atomicfile.Write(dataset.ProvenancePath(opts.Out), func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
				return Summary{}, err
			}
		}
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

func newScorer(opts Options) (*scorer, error) {
	s := &scorer{opts: opts, verifiers: map[string]verifiers.Verifier{}, truncated: map[string]verifiers.Verifier{}}
	var err error
	rc := opts.Reward
	if s.reward, err = confclip.NewReward(rc.Method, confclip.RewardParams{Weight: rc.Weight, Lo: rc.Lo, Hi: rc.Hi, Eps: rc.Eps, Lambda: rc.Lambda}); err != nil {
		return nil, err
	}
	if s.estimator, err = confclip.LookupConfidence(opts.Confidence.Estimator); err != nil {
		return nil, err
	}
	if s.estimator.NeedsEntropies && opts.Confidence.Vocab < 2 {
		return nil, fmt.Errorf("confidence.estimator %q needs the vocabulary size (confidence.vocab)", s.estimator.Name)
	}
	if err := confclip.CheckScope(opts.Confidence.Scope); err != nil {
		return nil, err
	}
	if s.advantage, err = confclip.AdvantageFor(opts.Advantage.Estimator, opts.Advantage.Scale); err != nil {
		return nil, err
	}
	if err := opts.Shard.Check(); err != nil {
		return nil, err
	}
	if opts.Shard.Enabled() && s.advantage.Batch {
		return nil, fmt.Errorf("advantage estimator %s (advantage.estimator %q, scale %q) needs every group's rewards, so it cannot be scored in shards",
			s.advantage.Name, opts.Advantage.Estimator, opts.Advantage.Scale)
	}
	s.shaping = confclip.Shaping{FormatWeight: rc.FormatWeight, Overlong: rc.Overlong, MaxLen: rc.MaxLen, CacheLen: rc.CacheLen,
		SelfCertaintyWeight: rc.SelfCertaintyWeight}
	if err := s.shaping.Check(); err != nil {
		return nil, err
	}
	s.needLength = rc.Overlong
	if rc.FormatWeight != 0 {
		fo := opts.Verifier.Options
		fo.Pattern = rc.FormatPattern
		if s.format, err = verifiers.New("format", fo); err != nil {
			return nil, fmt.Errorf("reward.format_weight: %w", err)
		}
	}
	return s, nil
}

// fail records a bad record or input: with SkipBad it is counted and Score
// goes on, otherwise it is the error Score returns.
func (s *scorer) fail(kind string, n int, err error) error {
	if !s.opts.SkipBad {
		return err
	}
	s.skipped.add(kind, n, err)
	return nil
}

// read decodes and checks every record.
func (s *scorer) read() ([]*scoreRecord, error) {
	f, err := os.Open(s.opts.In)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if recs, ok, err := s.readOpenAI(); ok || err != nil {
		return recs, err // OpenAI responses (completions.go)
	}
	r := dataset.NewReader(f, s.opts.In)
	var recs []*scoreRecord
	for {
		sr := &scoreRecord{}
		err := r.Next(&sr.rec)
		if err == io.EOF {
			return recs, nil
		}
		if le := (*dataset.LineError)(nil); errors.As(err, &le) {
			if s.opts.Shard.K != 0 {
				continue
			}
			if err := s.fail(badJSON, 1, err); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		sr.line = r.Line()
		if !s.opts.Shard.Has(sr.rec.PromptID) {
			continue
		}
		if kind, err := s.check(sr); err != nil {
			if err := s.fail(kind, 1, s.lineError(sr, err)); err != nil {
				return nil, err
			}
			continue
		}
		recs = append(recs, sr)
	}
}

func (s *scorer) lineError(sr *scoreRecord, err error) error {
	return &dataset.LineError{File: s.opts.In, Line: sr.line, Err: err}
}

// check validates one record and resolves its verifier.
func (s *scorer) check(sr *scoreRecord) (kind string, err error) {
	r := &sr.rec
	if r.Schema != "" && r.Schema != dataset.SchemaRollout {
		return badRecord, fmt.Errorf("schema %q, want %q", r.Schema, dataset.SchemaRollout)
	}
	if r.PromptID == "" {
		return badRecord, errors.New("missing prompt_id")
	}
	if r.Answer == "" {
		return badRecord, fmt.Errorf("prompt %q: missing reference answer", r.PromptID)
	}
	if err := checkTokens(r); err != nil {
		return badRecord, fmt.Errorf("prompt %q sample %d: %w", r.PromptID, r.Sample, err)
	}
	if s.needLength && tokenCount(r) < 0 && s.opts.TeacherForce == nil {
		return badRecord, fmt.Errorf("prompt %q sample %d: reward.overlong needs token counts and the record has no tokens", r.PromptID, r.Sample)
	}
	if s.reward.NeedsConfidence && !s.hasConfidenceInput(r) && s.opts.TeacherForce == nil {
		return badLogprobs, s.noLogprobs(r)
	}
	if s.needsSelfCertainty() && len(r.SelfCertainties) == 0 && s.opts.TeacherForce == nil {
		return badLogprobs, s.noSelfCertainties(r)
	}
	sr.verifier = r.Verifier
	if sr.verifier == "" {
		sr.verifier = s.opts.Verifier.Name
	}
	if _, ok := s.verifiers[sr.verifier]; !ok {
		v, err := verifiers.New(sr.verifier, s.opts.Verifier.Options)
		if err != nil {
			return badRecord, fmt.Errorf("prompt %q: %w", r.PromptID, err)
		}
		s.verifiers[sr.verifier] = v
		if s.truncated[sr.verifier], err = verifiers.NewTruncated(sr.verifier, s.opts.Verifier.Options); err != nil {
			return badRecord, fmt.Errorf("prompt %q: %w", r.PromptID, err)
		}
	}
	return "", nil
}

func (s *scorer) noLogprobs(r *dataset.Rollout) error {
	what := "log-probs"
	if s.estimator.NeedsEntropies {
		what = "entropies"
	}
	return fmt.Errorf("prompt %q sample %d has no %s; the %s reward needs the confidence %s reads: "+
		"teacher-force the completions with a model (--model) or use the binary reward",
		r.PromptID, r.Sample, what, s.reward.Name, s.estimator.Name)
}

// answerProbs computes, for reward answer_prob, each record's reference
// answer probability after its reasoning, and its prompt's straight after
// the prompt, by teacher forcing (the model the hook runs): the reasoning
// is the completion's text before the answer its verifier extracted (all of
// it when none was), the reference answer follows it, and the answer's
// tokens are those that overlap its bytes (a token may join the
// reasoning's last characters to the answer's first).
func (s *scorer) answerProbs(ctx context.Context, recs []*scoreRecord) error {
	if !s.reward.AnswerProb || len(recs) == 0 {
		return nil
	}
	if s.opts.TeacherForce == nil {
		return fmt.Errorf("%s: reward answer_prob teacher-forces the reference answer after each completion's reasoning: it needs the model (--model)", s.opts.In)
	}
	type job struct {
		rec  *dataset.Rollout
		from int // the answer's first byte in rec.Text
	}
	var jobs []job
	own := make([]int, len(recs)) // each record's job
	base := map[string]int{}      // prompt id: its base job
	for i, sr := range recs {
		r := &sr.rec
		cut := len(r.Text)
		if st := sr.result.Start; st >= 0 && st <= len(r.Text) {
			cut = st
		}
		own[i] = len(jobs)
		jobs = append(jobs, job{answerRecord(r, r.Text[:cut]), cut})
		if _, ok := base[r.PromptID]; !ok {
			base[r.PromptID] = len(jobs)
			jobs = append(jobs, job{answerRecord(r, ""), 0})
		}
	}
	forced := make([]*dataset.Rollout, len(jobs))
	for i, j := range jobs {
		forced[i] = j.rec
	}
	if err := s.opts.TeacherForce(ctx, forced); err != nil {
		return fmt.Errorf("teacher forcing the reference answers of %s: %w", s.opts.In, err)
	}
	prob := func(j job) float64 {
		r := j.rec
		lo, hi, ok := confclip.AnswerTokens(r.TokenOffsets, len(r.Text), j.from, len(r.Text))
		if !ok || hi > len(r.Logprobs) {
			return 0
		}
		return confclip.AnswerProb(r.Logprobs[lo:hi])
	}
	for i, sr := range recs {
		sr.answerP, sr.answerBase = prob(jobs[own[i]]), prob(jobs[base[sr.rec.PromptID]])
	}
	return nil
}

// answerRecord is a record to teacher-force: r's prompt, then the
// reasoning and r's reference answer.
func answerRecord(r *dataset.Rollout, reasoning string) *dataset.Rollout {
	return &dataset.Rollout{PromptID: r.PromptID, Sample: r.Sample, Prompt: r.Prompt, Messages: r.Messages,
		PromptTokens: r.PromptTokens, Answer: r.Answer, Text: reasoning + r.Answer}
}

// needsSelfCertainty reports whether the reward reads the completions'
// self-certainties: reward.method self_certainty, or a
// reward.self_certainty_weight.
func (s *scorer) needsSelfCertainty() bool {
	return s.reward.SelfCertainty || s.shaping.SelfCertaintyWeight != 0
}

func (s *scorer) noSelfCertainties(r *dataset.Rollout) error {
	return fmt.Errorf("prompt %q sample %d has no self-certainties (a rollout of confclip's records them); "+
		"the %s reward reads them: teacher-force the completions with a model (--model)", r.PromptID, r.Sample, s.reward.Name)
}

// hasConfidenceInput reports whether the record carries what the estimator reads.
func (s *scorer) hasConfidenceInput(r *dataset.Rollout) bool {
	return hasConfidenceInput(r, s.estimator.NeedsEntropies)
}

// hasConfidenceInput reports whether a record carries what a confidence
// estimator reads: log-probs, or entropies for one that needs them.
func hasConfidenceInput(r *dataset.Rollout, needsEntropies bool) bool {
	if needsEntropies {
		return len(r.Entropies) > 0
	}
	return len(r.Logprobs) > 0
}

// SetStats computes the summary's statistics from its scored records, group
// by group (the samples of one prompt): reward and binary-reward statistics,
// outcomes (accuracy, lengths), and the calibration of the records whose
// confidence had its input (hasConfidenceInput). Score builds its summary
// this way, and merging shards rebuilds the whole's from the records.
func (s *Summary) SetStats(reward string, needsEntropies bool, groups [][]*dataset.Scored) {
	rewards, binary := make([][]float64, len(groups)), make([][]float64, len(groups))
	correct, lengths := make([][]bool, len(groups)), make([][]int, len(groups))
	s.StatedMissing = 0
	var confs, stated []float64
	var confCorrect, statedCorrect []bool
	rw, err := confclip.NewReward(reward, confclip.DefaultRewardParams)
	readsStated := err == nil && rw.Stated
	for gi, g := range groups {
		for _, r := range g {
			b := []float64{0}
			confclip.Binary(b, []float64{r.VerifierResult.Score})
			rewards[gi] = append(rewards[gi], r.Reward)
			binary[gi] = append(binary[gi], b[0])
			correct[gi] = append(correct[gi], r.VerifierResult.Correct)
			lengths[gi] = append(lengths[gi], tokenCount(&r.Rollout))
			if hasConfidenceInput(&r.Rollout, needsEntropies) {
				confs = append(confs, r.Confidence)
				confCorrect = append(confCorrect, r.VerifierResult.Correct)
			}
			switch {
			case r.StatedConfidence != nil:
				stated = append(stated, *r.StatedConfidence)
				statedCorrect = append(statedCorrect, r.VerifierResult.Correct)
			case readsStated:
				s.StatedMissing++
			}
		}
	}
	s.Reward = confclip.RewardStatsOf(reward, rewards)
	s.Binary = confclip.RewardStatsOf("binary", binary)
	s.Outcomes = confclip.OutcomeStatsOf(correct, lengths)
	if len(confs) > 0 {
		cal := confclip.Calibrate(confs, confCorrect)
		s.Calibration = &cal
	}
	if len(stated) > 0 {
		cal := confclip.Calibrate(stated, statedCorrect)
		s.StatedCalibration = &cal
	}
}

// checkTokens checks that the per-token arrays agree in length and that the
// token offsets are non-decreasing byte offsets into Text.
func checkTokens(r *dataset.Rollout) error {
	n := tokenCount(r)
	for _, a := range []struct {
		name string
		len  int
	}{{"tokens", len(r.Tokens)}, {"logprobs", len(r.Logprobs)}, {"sampling_logprobs", len(r.SamplingLogprobs)}, {"entropies", len(r.Entropies)}, {"self_certainties", len(r.SelfCertainties)}, {"token_offsets", len(r.TokenOffsets)}} {
		if a.len != 0 && a.len != n {
			return fmt.Errorf("%s has %d entries but the completion has %d tokens", a.name, a.len, n)
		}
	}
	prev := 0
	for i, o := range r.TokenOffsets {
		if o < prev || o > len(r.Text) {
			return fmt.Errorf("token_offsets[%d] = %d: want non-decreasing offsets within the %d bytes of text", i, o, len(r.Text))
		}
		prev = o
	}
	return nil
}

// tokenCount is the completion length in tokens, or -1 when unknown.
func tokenCount(r *dataset.Rollout) int {
	switch {
	case len(r.Tokens) > 0:
		return len(r.Tokens)
	case len(r.Logprobs) > 0:
		return len(r.Logprobs)
	case len(r.Entropies) > 0:
		return len(r.Entropies)
	}
	return -1
}

// teacherForce fills in the log-probs (and entropies) of records that came
// without what the confidence estimator reads, whatever the reward, so that
// calibration can be reported for completions produced elsewhere too.
func (s *scorer) teacherForce(ctx context.Context, recs []*scoreRecord) (int, error) {
	if s.opts.TeacherForce == nil {
		return 0, nil
	}
	var need []*dataset.Rollout
	var srs []*scoreRecord
	for _, sr := range recs {
		// Records without token ids (log-probs from another server) are
		// tokenized too, so that they can be exported.
		if len(sr.rec.Logprobs) == 0 || !s.hasConfidenceInput(&sr.rec) || len(sr.rec.Tokens) == 0 || len(sr.rec.PromptTokens) == 0 ||
			s.needsSelfCertainty() && len(sr.rec.SelfCertainties) == 0 {
			need = append(need, &sr.rec)
			srs = append(srs, sr)
		}
	}
	if len(need) == 0 {
		return 0, nil
	}
	if err := s.opts.TeacherForce(ctx, need); err != nil {
		return 0, fmt.Errorf("teacher forcing %d records of %s: %w", len(need), s.opts.In, err)
	}
	for _, sr := range srs {
		if err := checkTokens(&sr.rec); err != nil {
			return 0, s.lineError(sr, fmt.Errorf("after teacher forcing: %w", err))
		}
		if s.needsSelfCertainty() && len(sr.rec.SelfCertainties) == 0 {
			return 0, s.lineError(sr, s.noSelfCertainties(&sr.rec))
		}
		if s.reward.NeedsConfidence && !s.hasConfidenceInput(&sr.rec) {
			return 0, s.lineError(sr, s.noLogprobs(&sr.rec))
		}
		if s.needLength && tokenCount(&sr.rec) < 0 {
			return 0, s.lineError(sr, errors.New("after teacher forcing: no tokens, and reward.overlong needs token counts"))
		}
	}
	return len(need), nil
}

// verify runs the verifiers (and the format verifier for shaping) over the
// records, several at a time.
func (s *scorer) verify(ctx context.Context, recs []*scoreRecord) error {
	workers := s.opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan *scoreRecord)
	var wg sync.WaitGroup
	for range min(workers, max(len(recs), 1)) {
		wg.Go(func() {
			for sr := range next {
				s.verifyOne(ctx, sr)
			}
		})
	}
	for _, sr := range recs {
		if ctx.Err() != nil {
			break
		}
		next <- sr
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, sr := range recs {
		if sr.bad != nil && sr.kind == badVerifier {
			if err := s.fail(badVerifier, 1, sr.bad); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *scorer) verifyOne(ctx context.Context, sr *scoreRecord) {
	r := &sr.rec
	v := s.verifiers[sr.verifier]
	if r.Finish == dataset.FinishLength {
		v = s.truncated[sr.verifier]
	}
	res, err := v.Verify(ctx, r.Text, r.Answer)
	if err == nil && s.format != nil {
		var f verifiers.Result
		f, err = s.format.Verify(ctx, r.Text, r.Answer)
		sr.format = f.Score
	}
	if err != nil {
		sr.bad, sr.kind = s.lineError(sr, fmt.Errorf("prompt %q sample %d: verifier %s: %w", r.PromptID, r.Sample, sr.verifier, err)), badVerifier
		return
	}
	sr.result = res
}

// dropBad removes the records marked bad (already counted).
func dropBad(recs []*scoreRecord) []*scoreRecord {
	kept := recs[:0]
	for _, sr := range recs {
		if sr.bad == nil {
			kept = append(kept, sr)
		}
	}
	return kept
}

// group splits records by prompt_id in order of first appearance and checks
// that all groups have the size most of them have; the records of a group of
// another size are marked bad.
func (s *scorer) group(recs []*scoreRecord) ([][]*scoreRecord, error) {
	index := map[string]int{}
	var groups [][]*scoreRecord
	for _, sr := range recs {
		g, ok := index[sr.rec.PromptID]
		if !ok {
			g = len(groups)
			index[sr.rec.PromptID] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], sr)
	}
	// The expected size is the commonest, ties going to the first seen.
	count := map[int]int{}
	want := 0
	for _, g := range groups {
		count[len(g)]++
		if count[len(g)] > count[want] {
			want = len(g)
		}
	}
	kept := groups[:0]
	for _, g := range groups {
		if len(g) == want {
			if err := s.checkSamples(g); err != nil {
				return nil, err
			}
			if g[0].bad == nil {
				kept = append(kept, g)
			}
			continue
		}
		first := g[0]
		err := s.lineError(first, fmt.Errorf("group of prompt %q has %d completions, want %d as in %d of %d groups",
			first.rec.PromptID, len(g), want, count[want], len(groups)))
		if err := s.fail(badGroupSize, len(g), err); err != nil {
			return nil, err
		}
		s.skipped.Groups++
		for _, sr := range g {
			sr.bad, sr.kind = err, badGroupSize
		}
	}
	return kept, nil
}

// checkSamples checks that a group's sample indices are 0..len(g)-1, each
// once (a -1, a 1e9 or a repeated index means the file was put together
// wrongly). A bad group's records are all marked bad.
func (s *scorer) checkSamples(g []*scoreRecord) error {
	seen := make(map[int]*scoreRecord, len(g))
	for _, sr := range g {
		var err error
		if n := sr.rec.Sample; n < 0 || n >= len(g) {
			err = fmt.Errorf("prompt %q: sample %d outside 0..%d (its group has %d completions)", sr.rec.PromptID, n, len(g)-1, len(g))
		} else if first, dup := seen[n]; dup {
			err = fmt.Errorf("prompt %q: sample %d appears twice (also on line %d)", sr.rec.PromptID, n, first.line)
		}
		seen[sr.rec.Sample] = sr
		if err == nil {
			continue
		}
		err = s.lineError(sr, err)
		if err := s.fail(badRecord, len(g), err); err != nil {
			return err
		}
		s.skipped.Groups++
		for _, r := range g {
			r.bad, r.kind = err, badRecord
		}
		return nil
	}
	return nil
}

// score computes confidence, reward and advantage group by group.
func (s *scorer) score(recs []*scoreRecord, groups [][]*scoreRecord) ([]*dataset.Scored, Summary) {
	o := s.opts
	sum := Summary{
		In: o.In, Out: o.Out, Groups: len(groups),
		Verifier: o.Verifier.Name, ConfidenceEstimator: s.estimator.Name, ConfidenceScope: o.Confidence.Scope,
		Advantage: o.Advantage.Estimator,
	}
	rewards := make([][]float64, len(groups))
	advs, truncs := make([][]float64, len(groups)), make([][]bool, len(groups))
	scored := make([][]*dataset.Scored, len(groups))
	for gi, g := range groups {
		n := len(g)
		v, c, format, lengths := make([]float64, n), make([]float64, n), make([]float64, n), make([]int, n)
		var certainty []float64 // self-certainties, when the reward reads them
		if s.needsSelfCertainty() {
			certainty = make([]float64, n)
		}
		truncated := make([]bool, n)
		for j, sr := range g {
			sc := s.scored(sr)
			sr.out = sc
			scored[gi] = append(scored[gi], sc)
			v[j], format[j] = sc.VerifierResult.Score, sr.format
			if certainty != nil {
				c[j], certainty[j] = s.rewardInput(sr, sc, true)
			} else {
				c[j], _ = s.rewardInput(sr, sc, false)
			}
			lengths[j] = tokenCount(&sr.rec)
			truncated[j] = sr.rec.Finish == dataset.FinishLength
			if hasConfidenceInput(&sr.rec, s.estimator.NeedsEntropies) && sc.ConfidenceScope != o.Confidence.Scope {
				sum.ScopeFallbacks++
			}
		}
		r := make([]float64, n)
		s.reward.Group(r, v, c)
		s.shaping.Apply(r, format, lengths, certainty)
		for j, sr := range g {
			sr.out.Reward = r[j]
		}
		rewards[gi], advs[gi], truncs[gi] = r, make([]float64, n), truncated
	}
	// The estimator sees the batch (GRPO with the batch's std needs every
	// group's rewards).
	s.advantage.Estimate(advs, rewards)
	for gi, g := range groups {
		if o.Advantage.MaskTruncated {
			confclip.MaskTruncated(advs[gi], truncs[gi])
			for _, t := range truncs[gi] {
				if t {
					sum.MaskedTruncated++
				}
			}
		}
		for j, sr := range g {
			sr.out.Advantage = advs[gi][j]
		}
	}
	out := make([]*dataset.Scored, len(recs))
	for i, sr := range recs {
		out[i] = sr.out
	}
	sum.Records = len(out)
	sum.SetStats(s.reward.Name, s.estimator.NeedsEntropies, scored)
	sum.Skipped = s.skipped
	return out, sum
}

// rewardInput is what the reward reads of a scored record beside its
// verdict: c, the estimator's confidence, or what the method puts in its
// place (rlcr: the stated confidence; answer_prob: the debiased answer
// probability; self_certainty: the self-certainty), and, with certainty,
// the self-certainty k. It records them on sc.
func (s *scorer) rewardInput(sr *scoreRecord, sc *dataset.Scored, certainty bool) (c, k float64) {
	c = sc.Confidence
	if s.reward.Stated {
		c = math.NaN() // RLCRMissing, unless it states one
		if q, ok := confclip.StatedConfidence(sr.rec.Text); ok {
			c, sc.StatedConfidence = q, &q
		}
	}
	if s.reward.AnswerProb {
		c = confclip.DebiasAnswerProb(sr.answerP, sr.answerBase)
		if sr.result.Start < 0 {
			// No answer stated: 0. Forcing the reference after the whole
			// text rewarded completions that lead up to the answer
			// without giving it, and a policy learned to write "The
			// answer is N." (docs/method.md).
			c = 0
		}
		sc.AnswerProb, sc.AnswerProbBase = &sr.answerP, &sr.answerBase
	}
	if certainty {
		k = confclip.SelfCertainty(sr.rec.SelfCertainties)
		kc := k
		sc.SelfCertainty = &kc
		if s.reward.SelfCertainty {
			c = k
		}
	}
	return c, k
}

// scored builds a record's output with its verdict and confidence.
func (s *scorer) scored(sr *scoreRecord) *dataset.Scored {
	r, res := &sr.rec, sr.result
	sc := &dataset.Scored{
		Rollout: *r,
		VerifierResult: dataset.VerifierResult{
			Name: sr.verifier, Score: res.Score, Correct: res.Correct,
			Extracted: res.Extracted, Reason: res.Reason,
		},
	}
	if res.Start >= 0 && res.End >= res.Start {
		sc.VerifierResult.AnswerSpan = []int{res.Start, res.End}
	}
	if sc.Schema == "" || sc.Schema == dataset.SchemaRollout {
		sc.Schema = dataset.SchemaScored
	}
	if !s.hasConfidenceInput(r) {
		sc.ConfidenceScope = "none (no log-probs)"
		return sc
	}
	lo, hi := 0, tokenCount(r)
	sc.ConfidenceScope = confclip.ScopeCompletion
	if s.opts.Confidence.Scope == confclip.ScopeAnswer {
		var reason string
		switch {
		case res.Start < 0:
			reason = "nothing extracted"
		case len(r.TokenOffsets) == 0:
			reason = "no token offsets"
		default:
			var ok bool
			if lo, hi, ok = confclip.AnswerTokens(r.TokenOffsets, len(r.Text), res.Start, res.End); ok {
				sc.ConfidenceScope = confclip.ScopeAnswer
			} else {
				lo, hi, reason = 0, tokenCount(r), "no token overlaps the answer span"
			}
		}
		if reason != "" {
			sc.ConfidenceScope = confclip.ScopeCompletion + " (fallback: " + reason + ")"
		}
	}
	sc.Confidence = s.estimator.Estimate(span(r.Logprobs, lo, hi), span(r.Entropies, lo, hi), s.opts.Confidence.Vocab)
	return sc
}

// span is a[lo:hi], or nil when a is absent.
func span(a []float64, lo, hi int) []float64 {
	if len(a) == 0 {
		return nil
	}
	return a[lo:hi]
}

// writeScored writes the records through a temporary file renamed into place.
func writeScored(path string, recs []*dataset.Scored) error {
	w, err := dataset.Create(path)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Commit()
}

// SortedReasons lists the skip reasons, commonest first (for printing).
func (s Skipped) SortedReasons() []string {
	keys := make([]string, 0, len(s.Reasons))
	for k := range s.Reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if s.Reasons[keys[i]] != s.Reasons[keys[j]] {
			return s.Reasons[keys[i]] > s.Reasons[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}
