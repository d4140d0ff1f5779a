package dataset_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/confclip/confclip/dataset"
)

// TestParquetByteFlips: issue 23's flipped Parquet files. Every one-bit
// flip of a small prompt file is either refused or read as the same rows;
// flips in the footer's column names and page index used to be read as
// other columns or other rows.
func TestParquetByteFlips(t *testing.T) {
	type row struct {
		ID     string `parquet:"id"`
		Prompt string `parquet:"prompt"`
		Answer string `parquet:"answer"`
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf, parquet.Compression(&parquet.Zstd))
	var rows []row
	for i := range 20 {
		rows = append(rows, row{fmt.Sprint(i), fmt.Sprintf("What is %d+%d?", i, i), fmt.Sprint(2 * i)})
	}
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	orig := buf.Bytes()
	dir := t.TempDir()
	path := filepath.Join(dir, "orig.parquet")
	os.WriteFile(path, orig, 0o644)
	want, err := dataset.ReadParquetRows(path)
	if err != nil || len(want) != len(rows) {
		t.Fatalf("the valid file: %d rows, %v", len(want), err)
	}
	refused := 0
	for i := range orig {
		b := bytes.Clone(orig)
		b[i] ^= 1
		p := filepath.Join(dir, "flip.parquet")
		os.WriteFile(p, b, 0o644)
		got, err := dataset.ReadParquetRows(p)
		if err != nil {
			refused++
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("a flip at byte %d of %d was read as other rows", i, len(orig))
		}
	}
	t.Logf("%d of %d flips refused, the rest read as the same rows", refused, len(orig))
}
