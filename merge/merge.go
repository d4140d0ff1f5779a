package merge

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/scoring"
	"github.com/confclip/confclip/shard"
)

// Result says what a merge joined.
type Result struct {
	Out     string   `json:"out"`
	Shards  int      `json:"shards"`
	Groups  int      `json:"groups"`
	Records int      `json:"records"`
	Inputs  []string `json:"inputs"` // in shard order
}

// checkShards parses each input's shard ("K/N") and checks that together
// they are 0..N-1, each once; it returns the inputs' order by shard, each
// input's shard, and the whole (N).
func checkShards(what string, files, specs []string) ([]int, []shard.Shard, shard.Shard, error) {
	if len(files) == 0 {
		return nil, nil, shard.Shard{}, fmt.Errorf("merge: no %s to merge", what)
	}
	byK := map[int]string{}
	order := make([]int, len(files))
	shards := make([]shard.Shard, len(files))
	n := 0
	for i, spec := range specs {
		if spec == "" {
			return nil, nil, shard.Shard{}, fmt.Errorf("%s: not a shard's %s (no shard recorded): nothing to merge it with", files[i], what)
		}
		s, err := shard.Parse(spec)
		if err != nil {
			return nil, nil, shard.Shard{}, fmt.Errorf("%s: %w", files[i], err)
		}
		if i == 0 {
			n = s.N
		} else if s.N != n {
			return nil, nil, shard.Shard{}, fmt.Errorf("%s is shard %s but %s is shard %s: the shards come from jobs of different sizes", files[i], spec, files[0], specs[0])
		}
		if prev, dup := byK[s.K]; dup {
			return nil, nil, shard.Shard{}, fmt.Errorf("shard %s is given twice: %s and %s", spec, prev, files[i])
		}
		byK[s.K] = files[i]
		order[i], shards[i] = s.K, s
	}
	var missing []string
	for k := range n {
		if _, ok := byK[k]; !ok {
			missing = append(missing, fmt.Sprintf("%d/%d", k, n))
		}
	}
	if len(missing) > 0 {
		return nil, nil, shard.Shard{}, fmt.Errorf("merge: shard %s missing (%d of %d given)", strings.Join(missing, ", "), len(files), n)
	}
	idx := make([]int, len(files))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return order[idx[a]] < order[idx[b]] })
	return idx, shards, shard.Shard{N: n}, nil
}

// Rollouts joins the rollout files of the N shards of one job into out
// (with its provenance file), shard by shard. It checks that every file was
// made by the same model, adapter and options (their provenance files), that
// the shards are 0..N-1 each once, that every group belongs to the shard
// its file says, holds G samples, and is in no other file.
func Rollouts(inputs []string, out string) (Result, error) {
	res := Result{Out: out}
	if err := atomicfile.NotInput(out, inputs...); err != nil {
		return res, err
	}
	provs, specs, err := readProvenances(inputs)
	if err != nil {
		return res, err
	}
	order, shards, whole, err := checkShards("rollout file", inputs, specs)
	if err != nil {
		return res, err
	}
	first := provs[order[0]]
	for _, i := range order[1:] {
		a, b := first, provs[i]
		a.Shard, b.Shard = "", ""
		if diff := a.Diff(b); len(diff) > 0 {
			return res, fmt.Errorf("%s and %s were made differently: %s", inputs[order[0]], inputs[i], strings.Join(diff, "; "))
		}
	}
	G := first.Settings.Group
	w, err := dataset.Create(out)
	if err != nil {
		return res, err
	}
	owner := map[string]string{} // prompt id -> file
	for _, i := range order {
		groups, records, err := appendRollouts(w, inputs[i], shards[i], specs[i], G, owner)
		if err != nil {
			w.Abort()
			return res, err
		}
		res.Groups += groups
		res.Records += records
		res.Inputs = append(res.Inputs, inputs[i])
	}
	res.Shards = whole.N
	merged := first
	merged.Shard = ""
	if err := atomicfile.WriteJSON(dataset.ProvenancePath(out), merged); err != nil {
		w.Abort()
		return res, err
	}
	return res, w.Commit()
}

// readProvenances reads each rollout file's provenance file, which says
// its shard ("K/N") and what made it.
func readProvenances(inputs []string) ([]dataset.RolloutProvenance, []string, error) {
	provs := make([]dataset.RolloutProvenance, len(inputs))
	specs := make([]string, len(inputs))
	for i, in := range inputs {
		b, err := os.ReadFile(dataset.ProvenancePath(in))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: its provenance file says which shard it is and what made it: %w", in, err)
		}
		if err := json.Unmarshal(b, &provs[i]); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", dataset.ProvenancePath(in), err)
		}
		specs[i] = provs[i].Shard
	}
	return provs, specs, nil
}

// appendRollouts copies one shard's rollout file into w, checking that
// every group belongs to the shard (spec), holds its G samples once each,
// and is in no other file (owner: prompt id -> file, filled here).
func appendRollouts(w *dataset.Writer, in string, s shard.Shard, spec string, G int, owner map[string]string) (groups, records int, err error) {
	recs, lines, _, err := dataset.ReadFile[dataset.Rollout](in, false)
	if err != nil {
		return 0, 0, err
	}
	samples := map[string]map[int]bool{}
	var ids []string
	for j := range recs {
		r := &recs[j]
		if !s.Has(r.PromptID) {
			return 0, 0, fmt.Errorf("%s:%d: prompt %q belongs to shard %d/%d, not %s", in, lines[j], r.PromptID, shard.Of(r.PromptID, s.N), s.N, spec)
		}
		if prev, ok := owner[r.PromptID]; ok && prev != in {
			return 0, 0, fmt.Errorf("%s:%d: prompt %q is in %s too", in, lines[j], r.PromptID, prev)
		}
		owner[r.PromptID] = in
		if samples[r.PromptID] == nil {
			samples[r.PromptID] = map[int]bool{}
			ids = append(ids, r.PromptID)
		}
		if samples[r.PromptID][r.Sample] || r.Sample < 0 || r.Sample >= G {
			return 0, 0, fmt.Errorf("%s:%d: prompt %q sample %d: repeated or outside 0..%d", in, lines[j], r.PromptID, r.Sample, G-1)
		}
		samples[r.PromptID][r.Sample] = true
		if err := w.Write(r); err != nil {
			return 0, 0, err
		}
	}
	for _, id := range ids {
		if len(samples[id]) != G {
			return 0, 0, fmt.Errorf("%s: prompt %q has %d of its %d samples: finish the shard (run its rollout again to resume) before merging", in, id, len(samples[id]), G)
		}
	}
	return len(ids), len(recs), nil
}

// ScoreResult is Scores' output: the merged records' file and the
// summary of all of them.
type ScoreResult struct {
	Result
	Summary scoring.Summary `json:"summary"`
}

// Scores joins the scored files of the N shards of one score job,
// given by their summaries (Score's JSON, whose "out" names the scored file,
// relative to the summary's folder when it is not found as written), into
// out, and computes the summary of the whole from the records themselves
// (reward and outcome statistics, calibration), not from the shards'
// averages; counts that only the summaries hold (records skipped,
// teacher-forced, masked, scope fallbacks) are added. The shards must have
// been scored with the same verifier, confidence, reward and advantage.
func Scores(summaries []string, out string) (ScoreResult, error) {
	res := ScoreResult{Result: Result{Out: out}}
	sums, specs, err := readSummaries(summaries)
	if err != nil {
		return res, err
	}
	order, shards, whole, err := checkShards("score summary", summaries, specs)
	if err != nil {
		return res, err
	}
	f := sums[order[0]]
	if err := sameScoring(summaries, sums, order); err != nil {
		return res, err
	}
	est, err := confclip.LookupConfidence(f.ConfidenceEstimator)
	if err != nil {
		return res, fmt.Errorf("%s: %w", summaries[order[0]], err)
	}
	total := scoring.Summary{Out: out, Verifier: f.Verifier, ConfidenceEstimator: f.ConfidenceEstimator, ConfidenceScope: f.ConfidenceScope, Advantage: f.Advantage}
	var inputs []string
	w, err := dataset.Create(out)
	if err != nil {
		return res, err
	}
	var groups [][]*dataset.Scored
	owner := map[string]string{}
	for _, i := range order {
		s := sums[i]
		in := scoredFile(summaries[i], s)
		inputs = append(inputs, s.In)
		n, err := appendScored(w, in, summaries[i], s, shards[i], specs[i], &groups, owner)
		if err != nil {
			w.Abort()
			return res, err
		}
		total.Records += n
		total.ScopeFallbacks += s.ScopeFallbacks
		total.TeacherForced += s.TeacherForced
		total.MaskedTruncated += s.MaskedTruncated
		total.Skipped.Add(s.Skipped)
		total.Seconds = max(total.Seconds, s.Seconds) // the shards ran side by side
		res.Inputs = append(res.Inputs, in)
	}
	total.In = strings.Join(inputs, ",")
	total.Groups = len(groups)
	total.SetStats(f.Reward.Method, est.NeedsEntropies, groups)
	res.Shards, res.Groups, res.Records, res.Summary = whole.N, total.Groups, total.Records, total
	return res, w.Commit()
}

// readSummaries reads the shards' score summaries and their shards.
func readSummaries(summaries []string) ([]scoring.Summary, []string, error) {
	sums := make([]scoring.Summary, len(summaries))
	specs := make([]string, len(summaries))
	for i, path := range summaries {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		if err := json.Unmarshal(b, &sums[i]); err != nil {
			return nil, nil, fmt.Errorf("%s: not a score summary: %w", path, err)
		}
		specs[i] = sums[i].Shard
	}
	return sums, specs, nil
}

// sameScoring refuses shards scored with another verifier, confidence,
// reward or advantage than the first.
func sameScoring(summaries []string, sums []scoring.Summary, order []int) error {
	f := sums[order[0]]
	for _, i := range order[1:] {
		s := sums[i]
		if s.Verifier != f.Verifier || s.ConfidenceEstimator != f.ConfidenceEstimator || s.ConfidenceScope != f.ConfidenceScope ||
			s.Advantage != f.Advantage || s.Reward.Method != f.Reward.Method {
			return fmt.Errorf("%s and %s were scored differently (verifier %q/%q, confidence %q %q/%q %q, reward %q/%q, advantage %q/%q)",
				summaries[order[0]], summaries[i], f.Verifier, s.Verifier, f.ConfidenceEstimator, f.ConfidenceScope, s.ConfidenceEstimator, s.ConfidenceScope,
				f.Reward.Method, s.Reward.Method, f.Advantage, s.Advantage)
		}
	}
	return nil
}

// scoredFile is the scored file a summary names: as written, or beside the
// summary when it is not found so (a shard's folder copied elsewhere).
func scoredFile(summary string, s scoring.Summary) string {
	in := s.Out
	if _, err := os.Stat(in); err != nil && !filepath.IsAbs(in) {
		in = filepath.Join(filepath.Dir(summary), filepath.Base(in))
	}
	return in
}

// appendScored copies one shard's scored records into w and their groups
// into groups, checking them against the shard's summary and that every
// prompt is in the shard (spec) and in no other file (owner); it returns
// how many records it copied.
func appendScored(w *dataset.Writer, in, summary string, s scoring.Summary, sh shard.Shard, spec string, groups *[][]*dataset.Scored, owner map[string]string) (int, error) {
	if s.Out == "" {
		return 0, fmt.Errorf("%s: the shard wrote no scored file (score --out) to merge", summary)
	}
	recs, lines, _, err := dataset.ReadFile[dataset.Scored](in, false)
	if err != nil {
		return 0, err
	}
	if len(recs) != s.Records {
		return 0, fmt.Errorf("%s holds %d records but its summary %s says %d: not the file that summary describes", in, len(recs), summary, s.Records)
	}
	index := map[string]int{}
	start := len(*groups)
	for j := range recs {
		r := &recs[j]
		if !sh.Has(r.PromptID) {
			return 0, fmt.Errorf("%s:%d: prompt %q is not in shard %s", in, lines[j], r.PromptID, spec)
		}
		if prev, ok := owner[r.PromptID]; ok && prev != in {
			return 0, fmt.Errorf("%s:%d: prompt %q is in %s too", in, lines[j], r.PromptID, prev)
		}
		owner[r.PromptID] = in
		g, ok := index[r.PromptID]
		if !ok {
			g = len(*groups)
			index[r.PromptID] = g
			*groups = append(*groups, nil)
		}
		(*groups)[g] = append((*groups)[g], r)
		if err := w.Write(r); err != nil {
			return 0, err
		}
	}
	if got := len(*groups) - start; got != s.Groups {
		return 0, fmt.Errorf("%s holds %d groups but its summary %s says %d", in, got, summary, s.Groups)
	}
	return len(recs), nil
}

// Eval joins the results of the N shards of one evaluation (Evaluate's
// JSON) and computes accuracy, mean length, calibration, sampled accuracy
// and pass@K from the prompts' cases, as one evaluation of all the prompts
// would. Cases are ordered by their line in the prompt file.
func Eval(paths []string) (pipeline.EvalResult, error) {
	rs := make([]pipeline.EvalResult, len(paths))
	specs := make([]string, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return pipeline.EvalResult{}, err
		}
		if err := json.Unmarshal(b, &rs[i]); err != nil {
			return pipeline.EvalResult{}, fmt.Errorf("%s: not an evaluation result (eval --json): %w", p, err)
		}
		specs[i] = rs[i].Shard
	}
	order, shards, _, err := checkShards("evaluation result", paths, specs)
	if err != nil {
		return pipeline.EvalResult{}, err
	}
	f := rs[order[0]]
	out := pipeline.EvalResult{Data: f.Data, Samples: f.Samples, Cases: []pipeline.EvalCase{}}
	seen := map[string]string{}
	for _, i := range order {
		r := rs[i]
		if r.Data != f.Data || r.Samples != f.Samples {
			return out, fmt.Errorf("%s (%s, K %d) and %s (%s, K %d) are not shards of one evaluation", paths[i], r.Data, r.Samples, paths[order[0]], f.Data, f.Samples)
		}
		if len(r.Cases) != r.Prompts {
			return out, fmt.Errorf("%s: %d cases for %d prompts", paths[i], len(r.Cases), r.Prompts)
		}
		sh := shards[i]
		for _, c := range r.Cases {
			if !sh.Has(c.ID) {
				return out, fmt.Errorf("%s: prompt %q is not in shard %s", paths[i], c.ID, specs[i])
			}
			if prev, dup := seen[c.ID]; dup && prev != paths[i] {
				return out, fmt.Errorf("%s: prompt %q is in %s too", paths[i], c.ID, prev)
			}
			seen[c.ID] = paths[i]
			out.Cases = append(out.Cases, c)
		}
		out.Seconds = max(out.Seconds, r.Seconds)
	}
	sort.SliceStable(out.Cases, func(a, b int) bool { return out.Cases[a].Line < out.Cases[b].Line })
	out.SetStats()
	return out, nil
}
