package dataset

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

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
	if err := checkParquetFooter(pf); err != nil {
		return nil, fmt.Errorf("%s: unreadable Parquet: %w", path, err)
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

// checkParquetFooter compares what the footer says twice: each column
// chunk's path and type with the schema's column. Page checksums cover the
// data, not the footer: a flipped byte in a column's name or type in one
// of the two places was read as another column (issue 23: 14 of 104
// byte-flipped files were accepted).
func checkParquetFooter(pf *parquet.File) error {
	cols := pf.Schema().Columns()
	md := pf.Metadata()
	for g, rg := range md.RowGroups {
		if len(rg.Columns) != len(cols) {
			return fmt.Errorf("row group %d has %d columns, the schema %d", g, len(rg.Columns), len(cols))
		}
		for c, cc := range rg.Columns {
			if !slices.Equal(cc.MetaData.PathInSchema, cols[c]) {
				return fmt.Errorf("row group %d: column %d is %q in the schema but %q in the column chunk (a corrupt footer)",
					g, c, strings.Join(cols[c], "."), strings.Join(cc.MetaData.PathInSchema, "."))
			}
			leaf, ok := pf.Schema().Lookup(cols[c]...)
			if ok && leaf.Node.Type().Kind() != parquet.Kind(cc.MetaData.Type) {
				return fmt.Errorf("row group %d: column %q is %v in the schema but %v in the column chunk (a corrupt footer)",
					g, strings.Join(cols[c], "."), leaf.Node.Type().Kind(), parquet.Kind(cc.MetaData.Type))
			}
		}
	}
	// The page index (one per column chunk, row group by row group) says
	// where each page starts and which row it starts with.
	for i, oi := range pf.OffsetIndexes() {
		g := i / max(len(cols), 1)
		if g >= len(md.RowGroups) {
			break
		}
		rows, prev := md.RowGroups[g].NumRows, int64(-1)
		for p, loc := range oi.PageLocations {
			if (p == 0 && loc.FirstRowIndex != 0) || loc.FirstRowIndex <= prev || loc.FirstRowIndex >= rows || loc.Offset < 0 || loc.CompressedPageSize <= 0 {
				return fmt.Errorf("row group %d: page %d of column %q: first row %d, offset %d, size %d in a group of %d rows (a corrupt page index)",
					g, p, strings.Join(cols[i%len(cols)], "."), loc.FirstRowIndex, loc.Offset, loc.CompressedPageSize, rows)
			}
			prev = loc.FirstRowIndex
		}
	}
	return nil
}
