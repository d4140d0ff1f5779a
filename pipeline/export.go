package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
)

// ExportOptions configure Export.
type ExportOptions struct {
	In  string // scored records (JSONL)
	Out string // training set, written atomically
	// Format is dataset.FormatJSONL or dataset.FormatParquet; "" picks Parquet when Out ends
	// in .parquet and JSONL otherwise.
	Format string
	// Layout names the columns: dataset.LayoutConfclip ("", what confclip train
	// reads), dataset.LayoutTRL or dataset.LayoutVerl (docs/export.md).
	Layout string

	// Model, when set, is the GGUF file the rollouts came from; its SHA-256
	// goes into every example's provenance.
	Model string
	// Adapter is the LoRA adapter the rollouts were sampled with, recorded
	// as given.
	Adapter string
	// ConfigJSON is the run's configuration as JSON; the SHA-256 of its
	// canonical form (keys sorted, no spaces) is the provenance's config
	// hash, so the same settings give the same hash however they were
	// written. Nil leaves the hash empty.
	ConfigJSON []byte

	// SkipZeroStd drops the groups (records sharing a prompt_id) whose
	// rewards are all equal: their advantages are all zero and they carry
	// no gradient (DAPO's dynamic sampling; METHOD.md "Advantages").
	SkipZeroStd bool
	// MinGroupStd, when > 0, drops the groups whose rewards' std (MeanStd's,
	// the spread the group advantages see) is below it: RLPR's std filter
	// (the run sets it from advantage.std_filter_beta).
	MinGroupStd float64
	// MaskTruncated writes a completion mask of zeros for completions that
	// stopped on the length limit (advantage.mask_truncated, whose scoring
	// already gave them advantage 0): the trainer then leaves them out of
	// the loss's denominators too, as TRL's mask_truncated_completions.
	MaskTruncated bool
}

// NewExportOptions are the options of an export under cfg: the model and
// adapter it names (for the provenance), its JSON (for the config hash),
// and [advantage] skip_zero_std and mask_truncated.
func NewExportOptions(cfg Config, in, out string) (ExportOptions, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return ExportOptions{}, fmt.Errorf("the configuration as JSON (for its hash): %w", err)
	}
	return ExportOptions{In: in, Out: out, Model: cfg.Model.Path, Adapter: cfg.Model.Adapter, ConfigJSON: b,
		SkipZeroStd: cfg.Advantage.SkipZeroStd, MaskTruncated: cfg.Advantage.MaskTruncated}, nil
}

// ExportSummary says what Export wrote.
type ExportSummary struct {
	Out           string
	Format        string
	Layout        string
	Records       int // scored records read
	Groups        int // distinct prompt ids
	ZeroStdGroups int // groups whose rewards are all equal
	Dropped       int // records dropped with those groups (SkipZeroStd)
	// LowStdGroups counts the groups MinGroupStd dropped (beyond the
	// zero-std ones SkipZeroStd drops), their records in Dropped.
	LowStdGroups int
	Examples     int // training examples written
	Tokens       int // completion tokens written
	// FromModelLogprobs counts records without sampling log-probs (teacher
	// forced) whose old_logprobs are the model log-probs instead.
	FromModelLogprobs int
	Provenance        dataset.Provenance
}

// Export turns scored completions into training examples, one per record, in
// input order (dataset.TrainExample): the prompt and completion token ids, a
// completion mask of ones, the sequence's advantage and its per-token
// broadcast, the sampling log-probs as old_logprobs, the reward, and the
// provenance. Advantages are used as scoring left them; with
// MaskTruncated a completion stopped on the length limit (advantage 0 from
// scoring) gets a mask of zeros.
//
// A record without completion or prompt tokens is an error that names its
// file and line: completions produced elsewhere need teacher forcing while
// scoring first. The scored file is read whole (scoring holds it in memory
// too); the output is written through a temporary file and renamed
// into place, so a failed export leaves no partial file.
func Export(opts ExportOptions) (ExportSummary, error) {
	sum := ExportSummary{Out: opts.Out}
	if err := atomicfile.NotInput(opts.Out, opts.In); err != nil {
		return sum, err
	}
	format, err := exportFormat(opts.Out, opts.Format)
	if err != nil {
		return sum, err
	}
	sum.Format = format
	if sum.Layout, err = dataset.CheckLayout(opts.Layout); err != nil {
		return sum, err
	}
	if sum.Provenance, err = newProvenance(opts); err != nil {
		return sum, err
	}

	recs, lines, _, err := dataset.ReadFile[dataset.Scored](opts.In, false)
	if err != nil {
		return sum, err
	}
	sum.Records = len(recs)
	zeroStd := zeroStdGroups(recs)
	sum.Groups = len(zeroStd)
	for _, zero := range zeroStd {
		if zero {
			sum.ZeroStdGroups++
		}
	}
	lowStd := map[string]bool{}
	if opts.MinGroupStd > 0 {
		for id, std := range groupStds(recs) {
			if std < opts.MinGroupStd && !(opts.SkipZeroStd && zeroStd[id]) {
				lowStd[id] = true
				sum.LowStdGroups++
			}
		}
	}

	w, err := dataset.CreateTrainWriter(opts.Out, format, sum.Layout)
	if err != nil {
		return sum, err
	}
	for i := range recs {
		rec := &recs[i]
		if opts.SkipZeroStd && zeroStd[rec.PromptID] || lowStd[rec.PromptID] {
			sum.Dropped++
			continue
		}
		ex, fromModel, err := trainExample(rec, sum.Provenance)
		if err != nil {
			w.Abort()
			return sum, &dataset.LineError{File: opts.In, Line: lines[i], Err: fmt.Errorf("prompt %q sample %d: %w", rec.PromptID, rec.Sample, err)}
		}
		if fromModel {
			sum.FromModelLogprobs++
		}
		if opts.MaskTruncated && rec.Finish == dataset.FinishLength {
			clear(ex.CompletionMask)
		}
		if err := w.Write(ex, rec.VerifierResult.Correct); err != nil {
			w.Abort()
			return sum, err
		}
		sum.Examples++
		sum.Tokens += len(ex.CompletionIDs)
	}
	if err := w.Commit(); err != nil {
		return sum, err
	}
	return sum, nil
}

// exportFormat checks format, or infers it from the output's extension.
func exportFormat(out, format string) (string, error) {
	switch format {
	case dataset.FormatJSONL, dataset.FormatParquet:
		return format, nil
	case "":
		if strings.EqualFold(filepath.Ext(out), ".parquet") {
			return dataset.FormatParquet, nil
		}
		return dataset.FormatJSONL, nil
	}
	return "", fmt.Errorf("export format %q: want %s or %s", format, dataset.FormatJSONL, dataset.FormatParquet)
}

func newProvenance(opts ExportOptions) (dataset.Provenance, error) {
	p := dataset.Provenance{Adapter: opts.Adapter}
	if opts.Model == "" {
		// No model given: the rollout's provenance, which score keeps
		// beside its output, says what made the completions.
		if b, err := os.ReadFile(dataset.ProvenancePath(opts.In)); err == nil {
			var rp dataset.RolloutProvenance
			if err := json.Unmarshal(b, &rp); err != nil {
				return p, fmt.Errorf("%s: %w", dataset.ProvenancePath(opts.In), err)
			}
			p.ModelSHA256 = rp.ModelSHA256
			if p.Adapter == "" {
				p.Adapter = rp.Adapter
			}
		}
	}
	if opts.Model != "" {
		h, err := dataset.FileSHA256(opts.Model)
		if err != nil {
			return p, fmt.Errorf("hashing the model: %w", err)
		}
		p.ModelSHA256 = h
	}
	if opts.ConfigJSON != nil {
		h, err := dataset.ConfigHash(opts.ConfigJSON)
		if err != nil {
			return p, err
		}
		p.ConfigHash = h
	}
	return p, nil
}

// zeroStdGroups reports, for each prompt id, whether all its records'
// rewards are equal (zero standard deviation; a group of one counts, as its
// advantage is 0 too).
// groupStds is each group's reward std (confclip.MeanStd's), by prompt id.
func groupStds(recs []dataset.Scored) map[string]float64 {
	rewards := map[string][]float64{}
	for _, rec := range recs {
		rewards[rec.PromptID] = append(rewards[rec.PromptID], rec.Reward)
	}
	out := make(map[string]float64, len(rewards))
	for id, r := range rewards {
		_, out[id] = confclip.MeanStd(r)
	}
	return out
}

func zeroStdGroups(recs []dataset.Scored) map[string]bool {
	first := map[string]float64{}
	zero := map[string]bool{}
	for _, rec := range recs {
		if r0, seen := first[rec.PromptID]; !seen {
			first[rec.PromptID], zero[rec.PromptID] = rec.Reward, true
		} else if rec.Reward != r0 {
			zero[rec.PromptID] = false
		}
	}
	return zero
}

// trainExample builds the example for one scored record. fromModel reports
// that the record had no sampling log-probs and the model log-probs stood in
// for old_logprobs (teacher-forced completions, whose sampling distribution
// is unknown; with temperature 1 and no truncation the two are equal).
func trainExample(rec *dataset.Scored, prov dataset.Provenance) (ex dataset.TrainExample, fromModel bool, err error) {
	n := len(rec.Tokens)
	if n == 0 && len(rec.Logprobs) > 0 {
		return ex, false, fmt.Errorf("log-probs for %d tokens but no token ids (completions from another server): "+
			"score with the model (confclip score --model M), which tokenizes them, before exporting", len(rec.Logprobs))
	}
	if n == 0 {
		return ex, false, errors.New("no completion tokens: score with a model (teacher forcing) before exporting")
	}
	if len(rec.PromptTokens) == 0 {
		return ex, false, errors.New("no prompt tokens: score with a model (teacher forcing) before exporting")
	}
	old := rec.SamplingLogprobs
	if len(old) == 0 {
		old, fromModel = rec.Logprobs, true
	}
	if len(old) != n {
		return ex, false, fmt.Errorf("%d tokens but %d log-probs (sampling_logprobs, or logprobs when those are absent)", n, len(old))
	}
	mask := make([]int32, n)
	adv := make([]float64, n)
	for i := range n {
		mask[i], adv[i] = 1, rec.Advantage
	}
	return dataset.TrainExample{
		Schema:         dataset.SchemaTrain,
		PromptID:       rec.PromptID,
		Sample:         rec.Sample,
		PromptIDs:      rec.PromptTokens,
		CompletionIDs:  rec.Tokens,
		CompletionMask: mask,
		Advantage:      rec.Advantage,
		Advantages:     adv,
		OldLogprobs:    old,
		Reward:         rec.Reward,
		Provenance:     prov,
		Prompt:         rec.Prompt,
		Completion:     rec.Text,
		Answer:         rec.Answer,
		Messages:       rec.Messages,
		Meta:           rec.Meta,
	}, fromModel, nil
}
