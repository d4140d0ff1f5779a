package llama

import "os"

// GGUFDataOffset is where a file's tensor data starts, by the pre-check's
// reading of its header (0 when the pre-check rejects it).
func GGUFDataOffset(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	h, err := precheckGGUF(f, st.Size())
	if err != nil {
		return 0
	}
	return int64(h.DataStart)
}

// CheckSpace is checkSpace, for the full-disk test.
var CheckSpace = checkSpace

// ExpValues is expValues: LogitRows' exponentials, for their test.
var ExpValues = expValues

// QuantMatMul is quantMatMul, for the tests of patches 0040, 0042 and 0044.
var QuantMatMul = quantMatMul

// OutProdLayouts is outProdLayouts, for the test of patch 0044.
var OutProdLayouts = outProdLayouts

// Q8KFirstDifference is q8KFirstDifference, for the test of patch 0046.
var Q8KFirstDifference = q8KFirstDifference
