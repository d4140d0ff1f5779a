package rollout

import (
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
)

// RenderChat is the text a model sees for a chat prompt: the messages (or,
// without any, prompt as one user message) through the chat template tmpl
// ("" for the model's own), with the assistant's turn opened. The engine
// renders chat prompts with it, and scoring a chat server's responses
// renders their prompts the same way, so that teacher forcing sees the text
// that was answered.
func RenderChat(m *llama.Model, tmpl string, msgs []dataset.Message, prompt string) (string, error) {
	lm := make([]llama.Message, 0, len(msgs)+1)
	for _, x := range msgs {
		lm = append(lm, llama.Message{Role: x.Role, Content: x.Content})
	}
	if len(lm) == 0 {
		lm = append(lm, llama.Message{Role: "user", Content: prompt})
	}
	return m.ApplyChatTemplate(tmpl, lm, true)
}
