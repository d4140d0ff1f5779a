package dataset

// ReadPromptFile reads a prompt file in any shape ReadPrompts knows
// (confclip, TRL, verl, GSM8K, MATH; JSONL or Parquet), with fieldMap (the
// --map flag or data.map, "prompt=question,answer=solution") naming the
// fields of any other. PromptFile.Shape says how it was read, for the
// caller to show once.
func ReadPromptFile(path, fieldMap string, skipBad bool) (PromptFile, error) {
	m, err := ParseFieldMap(fieldMap)
	if err != nil {
		return PromptFile{Path: path}, err
	}
	return ReadPrompts(path, m, skipBad)
}
