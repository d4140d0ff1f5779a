package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/confclip/confclip/internal/atomicfile"
)

// MaxLineBytes bounds one JSONL line (64 MiB); longer lines are an error.
const MaxLineBytes = 64 << 20

// maxLine is MaxLineBytes, lowered by tests.
var maxLine = MaxLineBytes

// LineError is a problem with one line of a JSONL file.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Reader reads JSON objects, one a line, remembering the line number.
// Blank lines are skipped. A line longer than MaxLineBytes is an error for
// that line only: the rest of it is read and dropped without being kept,
// and the next call goes on with the next line.
type Reader struct {
	name string
	br   *bufio.Reader
	line int
	buf  []byte
	err  error // a read error that ends the file
}

// NewReader reads JSON Lines from r; name is used in error messages.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{name: name, br: bufio.NewReaderSize(r, 64*1024)}
}

// Line is the number of the line last read (1-based).
func (r *Reader) Line() int { return r.line }

// Name is the file name given to NewReader.
func (r *Reader) Name() string { return r.name }

// readLine reads the next line without its newline. tooLong is set when
// the line was longer than MaxLineBytes; its bytes past the limit were
// discarded as they came. ok is false at the end of the input.
func (r *Reader) readLine() (line []byte, tooLong, ok bool) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !tooLong {
			if len(r.buf)+len(chunk) > maxLine+1 { // +1: the newline
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(r.buf, []byte("\n")), tooLong, true
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if len(r.buf) == 0 && !tooLong && len(chunk) == 0 {
				return nil, false, false
			}
			return r.buf, tooLong, true
		default:
			r.err = err
			return nil, false, false
		}
	}
}

// Next decodes the next non-blank line into v. It returns io.EOF at the end.
// A malformed or over-long line gives a *LineError; the reader can go on
// after it. Unknown fields are errors, so that a typo in a key does not pass
// silently.
func (r *Reader) Next(v any) error {
	for {
		line, tooLong, ok := r.readLine()
		if !ok {
			break
		}
		r.line++
		if tooLong {
			return &LineError{File: r.name, Line: r.line, Err: fmt.Errorf("line longer than %d bytes", maxLine)}
		}
		b := bytes.TrimSpace(line)
		if len(b) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(v); err != nil {
			return &LineError{File: r.name, Line: r.line, Err: fmt.Errorf("malformed JSON: %w", err)}
		}
		if dec.More() {
			return &LineError{File: r.name, Line: r.line, Err: errors.New("malformed JSON: more than one value on the line")}
		}
		return nil
	}
	if r.err != nil {
		return fmt.Errorf("%s: %w", r.name, r.err)
	}
	return io.EOF
}

// ReadFile reads every record of a JSONL file. It stops at the first bad
// line unless skipBad is set, in which case bad lines are returned in skipped.
func ReadFile[T any](path string, skipBad bool) (recs []T, lines []int, skipped []*LineError, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	r := NewReader(f, path)
	for {
		var v T
		err := r.Next(&v)
		if err == io.EOF {
			return recs, lines, skipped, nil
		}
		var le *LineError
		if err != nil && errors.As(err, &le) && skipBad {
			skipped = append(skipped, le)
			continue
		}
		if err != nil {
			return nil, nil, nil, err
		}
		recs = append(recs, v)
		lines = append(lines, r.Line())
	}
}

// Writer writes JSON Lines to a temporary file beside the target and renames
// it into place on Commit, so a failed or killed run never leaves a half
// written output file. Each record is one complete line.
type Writer struct {
	path string
	f    *atomicfile.File
	bw   *bufio.Writer
	n    int
}

// Create starts writing path (through a temporary file beside it, see
// internal/atomicfile for links, devices and modes).
func Create(path string) (*Writer, error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	return &Writer{path: path, f: f, bw: bufio.NewWriterSize(f, 1<<20)}, nil
}

// Write appends one record as one line.
func (w *Writer) Write(v any) error {
	b, err := line(v)
	if err != nil {
		return fmt.Errorf("%s: encoding record %d: %w", w.path, w.n+1, err)
	}
	if _, err := w.bw.Write(b); err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	w.n++
	return nil
}

// Count is the number of records written so far.
func (w *Writer) Count() int { return w.n }

// Commit flushes, syncs and renames the file into place.
func (w *Writer) Commit() error {
	if err := w.bw.Flush(); err != nil {
		w.Abort()
		return fmt.Errorf("%s: %w", w.path, err)
	}
	return w.f.Commit()
}

// Abort throws the temporary file away; the target is left as it was.
func (w *Writer) Abort() { w.f.Abort() }

// Appender appends whole lines to a file that is kept (used by resumable
// stages such as rollout). Each Write is a single write(2) of a complete line,
// so a kill between writes never leaves a partial record; TruncatePartial
// repairs a file whose last line was cut anyway (a crash mid-write).
type Appender struct {
	f    *os.File
	path string
}

// OpenAppend opens path for appending, first cutting off a trailing partial
// line if one is there.
func OpenAppend(path string) (*Appender, error) {
	if err := TruncatePartial(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Appender{f: f, path: path}, nil
}

// Write appends one record as one line.
func (a *Appender) Write(v any) error {
	b, err := line(v)
	if err != nil {
		return fmt.Errorf("%s: %w", a.path, err)
	}
	return a.write(b)
}

// write appends b in one write(2). A short write (a full disk, a file size
// limit) is taken back by truncating the file to its size before, so that
// the file never ends in part of a record and a caller that counts its
// successful writes counts what the file holds.
func (a *Appender) write(b []byte) error {
	st, err := a.f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", a.path, err)
	}
	n, err := a.f.Write(b)
	if err == nil {
		return nil
	}
	if n > 0 {
		if terr := a.f.Truncate(st.Size()); terr != nil {
			return fmt.Errorf("%s: %v; removing the partial record failed too: %v", a.path, err, terr)
		}
	}
	return fmt.Errorf("%s: %w", a.path, err)
}

// WriteLines appends several records in one write.
func (a *Appender) WriteLines(vs []any) error {
	var buf bytes.Buffer
	for _, v := range vs {
		b, err := line(v)
		if err != nil {
			return fmt.Errorf("%s: %w", a.path, err)
		}
		buf.Write(b)
	}
	return a.write(buf.Bytes())
}

// line encodes one record as a JSON line. Text stays as written: `<`, `>`
// and `&` are not escaped to \u003c and the like (HTML escaping is for
// JSON embedded in HTML; prompts and completions hold such characters).
func line(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Close closes the file.
func (a *Appender) Close() error { return a.f.Close() }

// TruncatePartial cuts a file back to its last newline.
func TruncatePartial(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b) == 0 || b[len(b)-1] == '\n' {
		return nil
	}
	i := bytes.LastIndexByte(b, '\n')
	return os.Truncate(path, int64(i+1))
}
