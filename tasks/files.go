package tasks

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/confclip/confclip/dataset"
)

// WritePrompts writes the problems as prompt records (dataset.Prompt, JSON
// Lines, verifier "math") to path, atomically. Each record's meta holds the
// op and the shortest and longest solutions' lengths in bytes. With a
// system prompt, each record is a chat instead, for an instruct model: that
// system message and the question as the user's ("Tom has 3 apples and
// gets 4 more. How many apples?", without the plain prompt's "Q: " and
// " A:").
func WritePrompts(path string, ps []Problem, system string) error {
	w, err := dataset.Create(path)
	if err != nil {
		return err
	}
	for _, p := range ps {
		rec := dataset.Prompt{
			Schema:   dataset.SchemaPrompt,
			ID:       p.ID,
			Prompt:   p.Prompt,
			Answer:   p.Answer,
			Verifier: Verifier,
			Meta: map[string]any{
				"op":           string(p.Op),
				"shortest_len": len(p.Solutions[len(p.Solutions)-1]),
				"longest_len":  len(p.Solutions[0]),
			},
		}
		if system != "" {
			rec.Prompt = ""
			rec.Messages = []dataset.Message{{Role: "system", Content: system}, {Role: "user", Content: Question(p.Prompt)}}
		}
		if err := w.Write(rec); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Commit()
}

// Question is a problem's prompt as a question alone: "Q: 3+4=? A:" gives
// "3+4=?".
func Question(prompt string) string {
	return strings.TrimSuffix(strings.TrimPrefix(prompt, "Q: "), " A:")
}

// WriteCorpus writes the corpus texts one a line. Texts must not contain a
// newline (those from Corpus never do).
func WriteCorpus(w io.Writer, texts []string) error {
	bw := bufio.NewWriter(w)
	for i, t := range texts {
		if strings.ContainsAny(t, "\r\n") {
			return fmt.Errorf("corpus text %d contains a newline", i+1)
		}
		bw.WriteString(t)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// ReadCorpus reads texts written by WriteCorpus, one a line; blank lines are
// skipped.
func ReadCorpus(r io.Reader) ([]string, error) {
	var texts []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if t := strings.TrimRight(sc.Text(), "\r"); t != "" {
			texts = append(texts, t)
		}
	}
	return texts, sc.Err()
}
