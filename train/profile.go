package train

import (
	"sort"

	"github.com/confclip/confclip/llama"
)

// Profile is the time and bytes by ggml op, forward and backward, of the
// evaluations since the trainer was created or ResetProfile (over every
// context it used: a longer sequence gives it a larger one); nil unless
// Config.Profile.
func (t *Trainer) Profile() []llama.OpStat { return mergeProfiles(t.profPrev, t.ctx.Profile()) }

// ResetProfile clears the profile's totals.
func (t *Trainer) ResetProfile() {
	t.profPrev = nil
	t.ctx.ResetProfile()
}

// mergeProfiles sums two profiles op by op and phase by phase, slowest first.
func mergeProfiles(a, b []llama.OpStat) []llama.OpStat {
	if a == nil {
		return b
	}
	type key struct {
		op       string
		backward bool
	}
	idx := map[key]int{}
	var out []llama.OpStat
	for _, s := range append(append([]llama.OpStat(nil), a...), b...) {
		k := key{s.Op, s.Backward}
		if i, ok := idx[k]; ok {
			o := &out[i]
			o.Count += s.Count
			o.Seconds += s.Seconds
			o.Bytes += s.Bytes
			o.Flops += s.Flops
			continue
		}
		idx[k] = len(out)
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seconds > out[j].Seconds })
	return out
}
