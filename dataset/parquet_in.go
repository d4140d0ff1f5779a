package dataset

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
)

// ReadParquetRows reads every row of a Parquet file as a generic object
// (nested structs as objects, lists as []any), whatever its schema: the
// prompt readers then map the columns by name, as they do for JSONL.
// parquet-go panics on some malformed files; that is turned into an error
// naming the file, so a bad input never crashes the process.
func ReadParquetRows(path string) (rows []map[string]any, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			rows, err = nil, fmt.Errorf("%s: unreadable Parquet: %v", path, r)
		}
	}()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := parquet.NewReader(pf)
	defer r.Close()
	for i := 0; ; i++ {
		var v any
		err := r.Read(&v)
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: row %d: %w", path, i+1, err)
		}
		row, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: row %d is a %T, not a record", path, i+1, v)
		}
		rows = append(rows, row)
	}
}
