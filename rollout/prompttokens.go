package rollout

import (
	"errors"
	"fmt"

	"github.com/confclip/confclip/dataset"
)

// PromptTokens is what Generate feeds the model for a prompt: the prompt
// (or its messages through the chat template) tokenized as Generate does.
// Records sampled elsewhere (an OpenAI-compatible server returns the
// completion's tokens, not the prompt's) get their prompt tokens from it.
func (e *Engine) PromptTokens(p *dataset.Prompt) ([]int32, error) {
	text, parseSpecial, err := e.render(p)
	if err != nil {
		return nil, err
	}
	toks, err := e.m.Tokenize(text, true, parseSpecial)
	if err != nil {
		return nil, fmt.Errorf("tokenizing the prompt: %w", err)
	}
	if len(toks) == 0 {
		return nil, errors.New("the prompt has no tokens")
	}
	out := make([]int32, len(toks))
	for i, t := range toks {
		out[i] = int32(t)
	}
	return out, nil
}
