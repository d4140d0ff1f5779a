package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/confclip/confclip/internal/atomicfile"
)

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

// ResumeRollouts returns the prompt ids whose G samples are all in out,
// after checking that out was made as prov says. A cut last line is
// removed; records of groups that are not complete (a crash in the middle of
// a group's write) are dropped, rewriting the file atomically. A new (or
// empty) out gets its provenance file.
func ResumeRollouts(out string, G int, prov RolloutProvenance) (map[string]bool, error) {
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
	if err := TruncatePartial(out); err != nil {
		return nil, err
	}
	recs, _, _, err := ReadFile[Rollout](out, false)
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
		w, err := Create(out)
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
