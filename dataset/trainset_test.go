package dataset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParquetWithoutCodec: a program that did not link dataset/parquetio
// refuses a Parquet file by name, saying what to import, for prompts and
// training sets alike, and writes none (this package's tests do not link
// the codec).
func TestParquetWithoutCodec(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.parquet")
	if err := os.WriteFile(path, []byte("PAR1 not read any further PAR1"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(what, file string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "dataset/parquetio") {
			t.Errorf("%s: %v, want an error naming the file and dataset/parquetio", what, err)
		}
	}
	_, err := ReadPrompts(path, FieldMap{}, false)
	check("ReadPrompts", path, err)
	_, err = ReadTrainExamples(path)
	check("ReadTrainExamples", path, err)
	out := filepath.Join(dir, "train.parquet")
	_, err = CreateTrainWriter(out, FormatParquet, LayoutConfclip)
	check("CreateTrainWriter", out, err)
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s was created: %v", out, err)
	}
}
