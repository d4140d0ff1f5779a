package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/shard"
	"github.com/confclip/confclip/verifiers"
)

// RolloutOptions say what Rollout samples and where it writes.
type RolloutOptions struct {
	Config Config // the [rollout] table and [model] ctx, threads, chat_template
	In     string // prompt records (JSONL)
	Out    string // rollout records (JSONL); an existing file is resumed
	// SkipBad skips malformed lines of In, counting them, instead of stopping.
	// AllowNoAnswer samples prompts without a reference answer although
	// their verifier needs one (scoring will refuse them); by default such
	// a prompt stops the rollout before any compute, naming its line.
	AllowNoAnswer bool
	SkipBad       bool
	// NoTiming leaves timing out of the records: the file then depends only
	// on the model, the prompts and the options.
	NoTiming bool
	// Restart deletes Out and starts over instead of resuming it.
	Restart bool
	// Progress, when set, receives a RolloutProgress after each group.
	Progress func(Event)
	// Shard, when set, takes only the prompts of one shard (package shard).
	Shard shard.Shard
	// Source, when set, generates the groups instead of the model (which
	// may then be nil): an OpenAI-compatible server (server.Client).
	Source RolloutSource
}

// RolloutSource generates rollout groups somewhere else than in this
// process's engine.
type RolloutSource interface {
	// Generate samples cfg.Rollout.Group completions for each prompt and
	// calls emit with each complete group, as rollout.Engine.Generate does.
	Generate(ctx context.Context, cfg Config, prompts []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error)
	// Model names what generates (an endpoint and a model), in place of the
	// model file and its hash in the provenance.
	Model() string
}

// PromptError is a prompt that was not generated, with its place in the
// user's file.
type PromptError struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func (e PromptError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s:%d: id %q: %s", e.File, e.Line, e.ID, e.Reason)
}

// RolloutResult is what Rollout did, and what the output file holds.
type RolloutResult struct {
	Out          string        `json:"out"`
	Groups       int           `json:"groups"`  // groups written by this call
	Records      int           `json:"records"` // completions written by this call
	Tokens       int           `json:"tokens"`  // completion tokens sampled by this call
	PromptTokens int           `json:"prompt_tokens"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	Prompts      int           `json:"prompts"`       // usable prompts in In
	AlreadyDone  int           `json:"already_done"`  // of those, complete in Out before this call
	FileGroups   int           `json:"file_groups"`   // complete groups in Out now
	Skipped      []string      `json:"skipped_lines"` // malformed lines of In (SkipBad)
	Failed       []PromptError `json:"failed"`        // prompts not generated, and why
	// PromptShape says how In was read ("read as gsm8k jsonl: prompt=question, ...").
	PromptShape string `json:"prompt_shape"`
	// Provenance is what made every record of Out (and is kept beside it).
	Provenance RolloutProvenance `json:"provenance"`
}

// TokensPerSecond is this call's completion token rate.
func (r RolloutResult) TokensPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Tokens) / r.Elapsed.Seconds()
}

// RolloutProvenance records what made a rollout file: the model and adapter
// (by content) and every option that changes the records. It is kept as
// JSON beside the file (ProvenancePath), so that a resume can refuse to mix
// records made another way.
type RolloutProvenance struct {
	Schema        string          `json:"schema"`
	Model         string          `json:"model"` // path when written (not compared)
	ModelSHA256   string          `json:"model_sha256"`
	Adapter       string          `json:"adapter,omitempty"` // path when written (not compared)
	AdapterSHA256 string          `json:"adapter_sha256"`
	Settings      RolloutSettings `json:"settings"`
	// Shard is "K/N" when the file holds one shard's prompts (package shard).
	Shard string `json:"shard,omitempty"`
}

// RolloutSettings are the options that change a rollout file's records.
type RolloutSettings struct {
	Group        int      `json:"group"`
	MaxTokens    int      `json:"max_tokens"`
	Temperature  float64  `json:"temperature"`
	TopP         float64  `json:"top_p"`
	TopK         int      `json:"top_k"`
	MinP         float64  `json:"min_p"`
	Seed         uint64   `json:"seed"`
	Stop         []string `json:"stop"`
	Chat         bool     `json:"chat"`
	ChatTemplate string   `json:"chat_template"`
	Ctx          int      `json:"ctx"`
	Timing       bool     `json:"timing"`
}

// SchemaRolloutProvenance versions the provenance file.
const SchemaRolloutProvenance = "confclip.rollout_provenance/1"

// ProvenancePath is the file beside a rollout file that says what made it.
func ProvenancePath(out string) string { return out + ".provenance.json" }

func rolloutSettings(cfg Config, noTiming bool) RolloutSettings {
	r := cfg.Rollout
	stop := r.Stop
	if stop == nil {
		stop = []string{}
	}
	return RolloutSettings{Group: r.Group, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK,
		MinP: r.MinP, Seed: r.Seed, Stop: stop, Chat: r.Chat, ChatTemplate: cfg.Model.ChatTemplate, Ctx: cfg.Model.Ctx, Timing: !noTiming}
}

// Rollout samples Group completions for each prompt of In with the model and
// appends each complete group to Out. An existing Out is resumed: its
// complete groups are kept, a group cut by a crash is dropped, and only the
// prompts not yet done are generated, provided the model, adapter and
// options are those that made the file (else the error names every
// difference; RolloutOptions.Restart starts over). Prompts without an id,
// with an id used before, or that the engine cannot take are listed in
// RolloutResult.Failed with their line and skipped. When ctx is cancelled
// the groups written so far are complete and the error is ctx's.
func Rollout(ctx context.Context, m *Model, o RolloutOptions) (RolloutResult, error) {
	res := RolloutResult{Out: o.Out}
	cfg := o.Config
	if err := o.check(); err != nil {
		return res, err
	}
	pf, err := ReadPromptFile(o.In, cfg.Data.Map, o.SkipBad)
	if err != nil {
		return res, err
	}
	res.PromptShape = pf.Shape
	for _, s := range pf.Skipped {
		res.Skipped = append(res.Skipped, s.Error())
	}
	kept, keptLines := o.keepPrompts(pf, &res)
	res.Prompts = len(kept)
	if !o.AllowNoAnswer {
		if err := checkAnswers(o.In, kept, keptLines, cfg.Verifier.Name); err != nil {
			return res, err
		}
	}
	if res.Provenance, err = o.provenance(m); err != nil {
		return res, err
	}
	todo, todoLines, err := o.resume(res.Provenance, kept, keptLines, &res)
	if err != nil {
		return res, err
	}
	generate, release, err := o.generator(m)
	if err != nil {
		return res, err
	}
	defer release()
	st, genErr := o.appendGroups(ctx, generate, todo, &res)
	res.Records, res.PromptTokens, res.Elapsed = st.Records, st.PromptTokens, st.Elapsed
	for _, re := range st.Errors {
		pe := PromptError{File: o.In, ID: re.ID, Reason: re.Reason}
		if re.Index >= 0 && re.Index < len(todoLines) {
			pe.Line = todoLines[re.Index]
		}
		res.Failed = append(res.Failed, pe)
	}
	sort.SliceStable(res.Failed, func(i, j int) bool { return res.Failed[i].Line < res.Failed[j].Line })
	return res, genErr
}

// check refuses options Rollout cannot start with, before reading anything.
func (o RolloutOptions) check() error {
	if o.In == "" || o.Out == "" {
		return errors.New("rollout: give the prompt file and the output file")
	}
	if err := o.Shard.Check(); err != nil {
		return err
	}
	if err := atomicfile.NotInput(o.Out, o.In, o.Config.Model.Path, o.Config.Model.Adapter); err != nil {
		return err
	}
	return o.Config.ValidateTables("rollout")
}

// keepPrompts keeps the shard's prompts with an id, each id once (ids key
// the resume and the groups); the others go to res.Failed.
func (o RolloutOptions) keepPrompts(pf dataset.PromptFile, res *RolloutResult) (kept []dataset.Prompt, keptLines []int) {
	seen := map[string]bool{}
	for i, p := range pf.Prompts {
		switch {
		case p.ID == "":
			if o.Shard.K == 0 { // said once, by the first shard
				res.Failed = append(res.Failed, PromptError{File: o.In, Line: pf.Lines[i], Reason: "no id"})
			}
		case !o.Shard.Has(p.ID):
		case seen[p.ID]:
			res.Failed = append(res.Failed, PromptError{File: o.In, Line: pf.Lines[i], ID: p.ID, Reason: "id used before"})
		default:
			seen[p.ID] = true
			kept = append(kept, p)
			keptLines = append(keptLines, pf.Lines[i])
		}
	}
	return kept, keptLines
}

// provenance is what the rollouts are made with: the model (or the
// remote source's) and the settings, and the shard.
func (o RolloutOptions) provenance(m *Model) (RolloutProvenance, error) {
	var prov RolloutProvenance
	if o.Source != nil {
		prov = RolloutProvenance{Schema: SchemaRolloutProvenance, Model: o.Source.Model(), ModelSHA256: "remote " + o.Source.Model(),
			Settings: rolloutSettings(o.Config, o.NoTiming)}
	} else {
		var err error
		if prov, err = m.rolloutProvenance(o.Config, o.NoTiming); err != nil {
			return prov, err
		}
	}
	prov.Shard = o.Shard.String()
	return prov, nil
}

// resume starts the output over (Restart) or takes up the groups it holds,
// made with the same provenance, and returns the prompts still to do.
func (o RolloutOptions) resume(prov RolloutProvenance, kept []dataset.Prompt, keptLines []int, res *RolloutResult) (todo []dataset.Prompt, todoLines []int, err error) {
	if o.Restart {
		for _, p := range []string{o.Out, ProvenancePath(o.Out)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, nil, err
			}
		}
	}
	done, err := resumeRollouts(o.Out, o.Config.Rollout.Group, prov)
	if err != nil {
		return nil, nil, err
	}
	res.FileGroups = len(done)
	for i, p := range kept {
		if done[p.ID] {
			res.AlreadyDone++
		} else {
			todo = append(todo, p)
			todoLines = append(todoLines, keptLines[i])
		}
	}
	return todo, todoLines, nil
}

// generateFunc samples groups of prompts and emits each when it is done.
type generateFunc func(ctx context.Context, ps []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error)

// generator is the rollout source: the remote one, or an engine of the
// model (release gives it back).
func (o RolloutOptions) generator(m *Model) (generate generateFunc, release func(), err error) {
	if o.Source != nil {
		return func(ctx context.Context, ps []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error) {
			return o.Source.Generate(ctx, o.Config, ps, emit)
		}, func() {}, nil
	}
	opts := EngineOptions(o.Config)
	opts.NoTiming = o.NoTiming
	e, err := m.engine(opts)
	if err != nil {
		return nil, nil, err
	}
	return e.Generate, func() { m.release(e) }, nil
}

// appendGroups samples the prompts and appends each group to the output as
// it is done, counting into res and reporting progress.
func (o RolloutOptions) appendGroups(ctx context.Context, generate generateFunc, todo []dataset.Prompt, res *RolloutResult) (rollout.Stats, error) {
	app, err := dataset.OpenAppend(o.Out)
	if err != nil {
		return rollout.Stats{}, err
	}
	defer app.Close()
	start := time.Now()
	batch := make([]any, o.Config.Rollout.Group)
	st, genErr := generate(ctx, todo, func(g []dataset.Rollout) error {
		for i := range g {
			batch[i] = &g[i]
		}
		if err := app.WriteLines(batch[:len(g)]); err != nil {
			return fmt.Errorf("%s: %w", o.Out, err)
		}
		res.Groups++
		res.FileGroups++
		for _, r := range g {
			res.Tokens += len(r.Tokens)
		}
		emit(o.Progress, RolloutProgress{Groups: res.Groups, Total: len(todo), Tokens: res.Tokens, Elapsed: time.Since(start)})
		return nil
	})
	if err := app.Close(); err != nil && genErr == nil {
		genErr = err
	}
	return st, genErr
}

// rolloutProvenance is what a rollout with these options would record.
func (m *Model) rolloutProvenance(cfg Config, noTiming bool) (RolloutProvenance, error) {
	p := RolloutProvenance{Schema: SchemaRolloutProvenance, Model: m.Path(), Adapter: m.AdapterPath(), Settings: rolloutSettings(cfg, noTiming)}
	if p.Settings.ChatTemplate == "" {
		p.Settings.ChatTemplate = m.cfg.ChatTemplate
	}
	var err error
	if p.ModelSHA256, err = m.SHA256(); err != nil {
		return p, err
	}
	p.AdapterSHA256, err = m.AdapterSHA256()
	return p, err
}

// resumeRollouts returns the prompt ids whose G samples are all in out,
// after checking that out was made as prov says. A cut last line is
// removed; records of groups that are not complete (a crash in the middle of
// a group's write) are dropped, rewriting the file atomically. A new (or
// empty) out gets its provenance file.
func resumeRollouts(out string, G int, prov RolloutProvenance) (map[string]bool, error) {
	pp := ProvenancePath(out)
	fi, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) || (err == nil && fi.Size() == 0) {
		return nil, atomicfile.WriteJSON(pp, prov)
	}
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(pp)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: no %s says what made its records, so they cannot be resumed safely: start over with --restart (RolloutOptions.Restart)", out, pp)
	}
	if err != nil {
		return nil, err
	}
	var old RolloutProvenance
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("%s: %w", pp, err)
	}
	if diff := prov.Diff(old); len(diff) > 0 {
		return nil, fmt.Errorf("%s was made with other settings (%s): %s; resume with the same ones, or start over with --restart",
			out, pp, strings.Join(diff, "; "))
	}
	if err := dataset.TruncatePartial(out); err != nil {
		return nil, err
	}
	recs, _, _, err := dataset.ReadFile[dataset.Rollout](out, false)
	if err != nil {
		return nil, fmt.Errorf("resuming: %w", err)
	}
	have := map[string]map[int]bool{}
	for _, r := range recs {
		if have[r.PromptID] == nil {
			have[r.PromptID] = map[int]bool{}
		}
		have[r.PromptID][r.Sample] = true
	}
	done := map[string]bool{}
	for id, samples := range have {
		complete := len(samples) == G
		for s := range G {
			complete = complete && samples[s]
		}
		if complete {
			done[id] = true
		}
	}
	keep := recs[:0]
	for _, r := range recs {
		if done[r.PromptID] {
			keep = append(keep, r)
		}
	}
	if len(keep) < len(recs) {
		w, err := dataset.Create(out)
		if err != nil {
			return nil, err
		}
		for i := range keep {
			if err := w.Write(&keep[i]); err != nil {
				w.Abort()
				return nil, err
			}
		}
		if err := w.Commit(); err != nil {
			return nil, err
		}
	}
	return done, nil
}

// Diff lists how p differs from old ("rollout.temperature: 1 in the file,
// 0.7 now"), comparing contents and settings, not paths.
func (p RolloutProvenance) Diff(old RolloutProvenance) []string {
	var out []string
	short := func(h string) string {
		if h == "" {
			return "none"
		}
		return h[:min(12, len(h))]
	}
	if p.ModelSHA256 != old.ModelSHA256 {
		out = append(out, fmt.Sprintf("model sha256 %s in the file (%s), %s now (%s)", short(old.ModelSHA256), old.Model, short(p.ModelSHA256), p.Model))
	}
	if p.AdapterSHA256 != old.AdapterSHA256 {
		out = append(out, fmt.Sprintf("adapter sha256 %s in the file, %s now", short(old.AdapterSHA256), short(p.AdapterSHA256)))
	}
	if p.Shard != old.Shard {
		out = append(out, fmt.Sprintf("shard %q in the file, %q now", old.Shard, p.Shard))
	}
	a, b := settingsMap(old.Settings), settingsMap(p.Settings)
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %s in the file, %s now", k, a[k], b[k]))
		}
	}
	return out
}

// settingsMap renders each setting as JSON text, keyed by its name. Settings
// that do not encode (a NaN) show as one entry saying so, which then differs
// from any good settings.
func settingsMap(s RolloutSettings) map[string]string {
	var raw map[string]json.RawMessage
	b, err := json.Marshal(s)
	if err == nil {
		err = json.Unmarshal(b, &raw)
	}
	if err != nil {
		return map[string]string{"settings": "not encodable: " + err.Error()}
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		out[k] = string(v)
	}
	return out
}

// String summarises what made a rollout file, in one line.
func (p RolloutProvenance) String() string {
	s := p.Settings
	adapter := "no adapter"
	if p.AdapterSHA256 != "" {
		adapter = "adapter sha256 " + p.AdapterSHA256[:min(12, len(p.AdapterSHA256))]
	}
	stops := make([]string, len(s.Stop))
	for i, x := range s.Stop {
		stops[i] = fmt.Sprintf("%q", x)
	}
	// Messages always go through the chat template; --chat decides for plain prompts.
	chat := "chat template for messages only"
	if s.Chat {
		chat = "chat template for every prompt"
	}
	return fmt.Sprintf("model sha256 %s, %s; group %d, max_tokens %d, temperature %g, top_p %g, top_k %d, min_p %g, seed %d, stop [%s], %s, ctx %d, timing %v",
		p.ModelSHA256[:min(12, len(p.ModelSHA256))], adapter, s.Group, s.MaxTokens, s.Temperature, s.TopP, s.TopK, s.MinP, s.Seed,
		strings.Join(stops, " "), chat, s.Ctx, s.Timing)
}

// checkAnswers refuses prompts without a reference answer whose verifier
// needs one, naming their lines, before compute is spent on them.
func checkAnswers(path string, prompts []dataset.Prompt, lines []int, verifier string) error {
	var bad []string
	for i, p := range prompts {
		v := cmp.Or(p.Verifier, verifier)
		if p.Answer == "" && verifiers.NeedsReference(v) {
			bad = append(bad, fmt.Sprintf("%s:%d: prompt %q has no reference answer, which the %s verifier needs", path, lines[i], p.ID, v))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	more := ""
	if len(bad) > 5 {
		more = fmt.Sprintf("\n(and %d more)", len(bad)-5)
		bad = bad[:5]
	}
	return fmt.Errorf("%s%s\ngive each an answer, choose a verifier that needs none (format), or sample anyway with --allow-no-answer", strings.Join(bad, "\n"), more)
}
