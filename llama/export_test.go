package llama

// GGUFDataOffset is where a file's tensor data starts, by the pre-check's
// reading of its header (0 when the pre-check rejects it).
func GGUFDataOffset(path string) int64 {
	h, err := precheckFile(path)
	if err != nil {
		return 0
	}
	return int64(h.DataStart)
}

// CheckSpace is checkSpace, for the full-disk test.
var CheckSpace = checkSpace

// ExpValues is expValues: LogitRows' exponentials, for their test.
var ExpValues = expValues
