package train

import "github.com/confclip/confclip/llama"

// Profile is the time and bytes by ggml op, forward and backward, of the
// evaluations since the trainer was created or ResetProfile; nil unless
// Config.Profile.
func (t *Trainer) Profile() []llama.OpStat { return t.ctx.Profile() }

// ResetProfile clears the profile's totals.
func (t *Trainer) ResetProfile() { t.ctx.ResetProfile() }
