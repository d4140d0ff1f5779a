package scoring

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/confclip/confclip/dataset"
)

// readOpenAI reads s.opts.In when it holds OpenAI responses (dataset.
// IsOpenAILine on its first record); ok is false for any other file, which
// read then takes as confclip rollout records. Each response's choices
// become one group. A response that does not say which prompt it answers,
// or carries no answer, takes them from the prompt file (Options.
// Prompts): by custom_id or prompt_id, else the n-th response answers the
// n-th prompt.
func (s *scorer) readOpenAI() (recs []*scoreRecord, ok bool, err error) {
	lines, err := openAILines(s.opts.In)
	if len(lines) == 0 || err != nil {
		return nil, err != nil, err
	}
	var pf dataset.PromptFile
	byID := map[string]*dataset.Prompt{}
	if s.opts.Prompts != "" {
		if pf, err = dataset.ReadPromptFile(s.opts.Prompts, s.opts.PromptMap, false); err != nil {
			return nil, true, err
		}
		for i := range pf.Prompts {
			byID[pf.Prompts[i].ID] = &pf.Prompts[i]
		}
	}
	samples := map[string]int{} // next sample index per prompt id
	for i, ln := range lines {
		ros, kind, err := s.openAIRollouts(ln.b, pf, byID, i)
		if err != nil {
			if err := s.fail(kind, 1, &dataset.LineError{File: s.opts.In, Line: ln.n, Err: err}); err != nil {
				return nil, true, err
			}
			continue
		}
		for _, ro := range ros {
			// Samples count up per prompt: n responses of one choice each
			// for one prompt are one group too.
			ro.Sample = samples[ro.PromptID]
			samples[ro.PromptID]++
			sr := &scoreRecord{rec: ro, line: ln.n}
			if kind, err := s.check(sr); err != nil {
				if err := s.fail(kind, 1, s.lineError(sr, err)); err != nil {
					return nil, true, err
				}
				continue
			}
			recs = append(recs, sr)
		}
	}
	return recs, true, nil
}

// openAILine is a non-blank line of a file of OpenAI responses.
type openAILine struct {
	n int
	b []byte
}

// openAILines reads the file's non-blank lines when its first one is an
// OpenAI response (none otherwise: the file is read as rollouts).
func openAILines(path string) ([]openAILine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), dataset.MaxLineBytes)
	var lines []openAILine
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if len(lines) == 0 && !dataset.IsOpenAILine(b) {
			return nil, nil
		}
		lines = append(lines, openAILine{n, bytes.Clone(b)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return lines, nil
}

// openAIRollouts turns one response into rollout records, joined with its
// prompt; kind names what was wrong with a line that could not be.
func (s *scorer) openAIRollouts(b []byte, pf dataset.PromptFile, byID map[string]*dataset.Prompt, i int) ([]dataset.Rollout, string, error) {
	rec, err := dataset.ParseOpenAILine(b)
	if err != nil {
		return nil, badJSON, err
	}
	if err := s.joinPrompt(&rec, pf, byID, i); err != nil {
		return nil, badRecord, err
	}
	ros, err := rec.Rollouts()
	if err != nil {
		return nil, badRecord, err
	}
	return ros, "", nil
}

// joinPrompt fills what a response lacks (prompt id, prompt, answer,
// verifier) from the prompt file, and renders a chat prompt with the
// model's template when a model is there to teacher-force with.
func (s *scorer) joinPrompt(rec *dataset.OpenAIRecord, pf dataset.PromptFile, byID map[string]*dataset.Prompt, n int) error {
	var p *dataset.Prompt
	switch {
	case rec.PromptID != "" && len(byID) > 0:
		if p = byID[rec.PromptID]; p == nil {
			return fmt.Errorf("prompt %q is not in %s", rec.PromptID, pf.Path)
		}
	case rec.PromptID == "" && len(pf.Prompts) > 0:
		if n >= len(pf.Prompts) {
			return fmt.Errorf("response %d has no prompt: %s holds %d (responses without custom_id or prompt_id answer the prompts in order)", n+1, pf.Path, len(pf.Prompts))
		}
		p = &pf.Prompts[n]
		rec.PromptID = p.ID
	case rec.PromptID == "":
		return errors.New("the response does not say which prompt it answers (no custom_id or prompt_id): give the prompt file (--prompts) to answer the prompts in order")
	}
	if p != nil {
		if rec.Prompt == "" && len(rec.Messages) == 0 {
			rec.Prompt, rec.Messages = p.Prompt, p.Messages
		}
		if rec.Answer == "" {
			rec.Answer = p.Answer
		}
		if rec.Verifier == "" {
			rec.Verifier = p.Verifier
		}
	}
	if rec.Answer == "" {
		hint := "give the prompt file with the answers (--prompts)"
		if p != nil {
			hint = fmt.Sprintf("prompt %q in %s has none either", p.ID, pf.Path)
		}
		return fmt.Errorf("prompt %q: no reference answer in the response: %s", rec.PromptID, hint)
	}
	// A chat response answered the prompt as the server's chat template
	// rendered it; teacher forcing must see the same text.
	chat := rec.Response.Object == "chat.completion" || len(rec.Response.Choices) > 0 && rec.Response.Choices[0].Message != nil
	if s.opts.RenderChat != nil && (chat || len(rec.Messages) > 0) {
		text, err := s.opts.RenderChat(rec.Messages, rec.Prompt)
		if err != nil {
			return fmt.Errorf("prompt %q: chat template: %w", rec.PromptID, err)
		}
		rec.Prompt, rec.Messages = text, nil
	}
	return nil
}
