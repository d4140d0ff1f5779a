// Package parquetio reads and writes the Parquet files of package dataset:
// prompt files of any column layout, and training sets in each export
// layout. It registers itself with dataset when linked in, so that a program
// that reads and writes only JSON Lines (a Go caller of pipeline's stages)
// does not carry a Parquet codec:
//
//	import _ "github.com/confclip/confclip/dataset/parquetio"
package parquetio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/parquet-go/parquet-go"
)

// ReadRows reads every row of a Parquet file as a generic object
// (nested structs as objects, lists as []any), whatever its schema: the
// prompt readers then map the columns by name, as they do for JSONL.
// parquet-go panics on some malformed files; that is turned into an error
// naming the file, so a bad input never crashes the process.
func ReadRows(path string) (rows []map[string]any, err error) {
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

func init() { dataset.RegisterParquet(codec{}) }

// codec is dataset.ParquetCodec over parquet-go.
type codec struct{}

func (codec) ReadRows(path string) ([]map[string]any, error) { return ReadRows(path) }

func (codec) ReadTrainExamples(path string) ([]dataset.TrainExample, error) {
	if err := checkParquetLayout(path); err != nil {
		return nil, err
	}
	exs, err := parquet.ReadFile[dataset.TrainExample](path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return exs, nil
}

func (codec) CreateTrain(path, layout string) (dataset.ParquetWriter, error) {
	switch layout {
	case dataset.LayoutTRL:
		return newPQ(path, layout, dataset.ToTRL)
	case dataset.LayoutVerl:
		return newPQ(path, layout, func(ex dataset.TrainExample, _ bool) dataset.VerlRow { return dataset.ToVerl(ex) })
	}
	return newPQ(path, layout, func(ex dataset.TrainExample, _ bool) dataset.TrainExample { return ex })
}

// pqWriter writes Parquet (zstd) rows of type T to a temporary file beside
// the target, renamed into place on commit.
type pqWriter[T any] struct {
	path string
	f    *atomicfile.File
	pw   *parquet.GenericWriter[T]
	conv func(dataset.TrainExample, bool) T
	row  [1]T
}

func newPQ[T any](path, layout string, conv func(dataset.TrainExample, bool) T) (*pqWriter[T], error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	pw := parquet.NewGenericWriter[T](f,
		parquet.Compression(&parquet.Zstd),
		parquet.KeyValueMetadata("confclip.schema", dataset.SchemaTrain),
		parquet.KeyValueMetadata(dataset.MetaLayout, layout))
	return &pqWriter[T]{path: path, f: f, pw: pw, conv: conv}, nil
}

func (w *pqWriter[T]) Write(ex dataset.TrainExample, correct bool) error {
	w.row[0] = w.conv(ex, correct)
	if _, err := w.pw.Write(w.row[:]); err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	return nil
}

func (w *pqWriter[T]) Commit() error {
	if err := w.pw.Close(); err != nil {
		w.f.Abort()
		return fmt.Errorf("%s: %w", w.path, err)
	}
	return w.f.Commit()
}

func (w *pqWriter[T]) Abort() { w.f.Abort() }

// checkParquetLayout refuses a Parquet training set written for another
// trainer (its confclip.layout metadata), which would otherwise read as rows
// of empty columns.
func checkParquetLayout(path string) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: unreadable Parquet: %v", path, r)
		}
	}()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if l, ok := pf.Lookup(dataset.MetaLayout); ok && l != dataset.LayoutConfclip {
		return fmt.Errorf("%s: a training set in the %s layout, for another trainer; export again without --format %s for confclip train", path, l, l)
	}
	return nil
}
