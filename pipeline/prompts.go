package pipeline

import (
	"github.com/confclip/confclip/dataset"
)

// ReadPromptFile reads a prompt file in any shape dataset.ReadPrompts knows
// (confclip, TRL, verl, GSM8K, MATH; JSONL or Parquet), with fieldMap (the
// --map flag or data.map, "prompt=question,answer=solution") naming the
// fields of any other. PromptFile.Shape says how it was read, for the
// caller to show once.
func ReadPromptFile(path, fieldMap string, skipBad bool) (dataset.PromptFile, error) {
	m, err := dataset.ParseFieldMap(fieldMap)
	if err != nil {
		return dataset.PromptFile{Path: path}, err
	}
	return dataset.ReadPrompts(path, m, skipBad)
}
