// Package atomicfile writes a file so that readers, and a process killed
// midway, see either the old file or the whole new one, never part of it.
//
// An output path is resolved the way a user means it: a symlink is
// followed and its target replaced (the link stays), a device or FIFO
// (/dev/null, a pipe) is written through rather than renamed over, and a
// new file gets mode 0666 less the umask, as a shell redirection would.
// Temporary files are named ".NAME.tmp-*" beside the target; those left
// by a killed process are removed when the target is written again.
package atomicfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// umask is the process's file mode creation mask, read once at start
// (reading it means setting it, so it is not done per file).
var umask = func() fs.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return fs.FileMode(m)
}()

// live are the temporary files this process is writing: CleanTemps leaves
// them alone.
var live sync.Map

// File is an output being written. Write to it, then Commit or Abort.
type File struct {
	*os.File
	target string // the resolved output path
	direct bool   // a device or FIFO, written in place
	mode   fs.FileMode
}

// Create starts writing path. Name() is where the bytes go (a temporary
// file, or the device itself), for a writer that needs a path.
func Create(path string) (*File, error) {
	target, err := Resolve(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	mode := 0o666 &^ umask
	if st, err := os.Stat(target); err == nil {
		if !st.Mode().IsRegular() {
			if st.IsDir() {
				return nil, fmt.Errorf("%s: is a directory", path)
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return &File{File: f, target: target, direct: true}, nil
		}
		mode = st.Mode().Perm() // a replaced file keeps its mode
	}
	CleanTemps(target)
	tmp, err := os.CreateTemp(filepath.Dir(target), tempPrefix(target)+"*")
	if err != nil {
		// Name the file the user asked for, not the temporary one.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	live.Store(tmp.Name(), true)
	return &File{File: tmp, target: target, mode: mode}, nil
}

// Commit syncs the bytes and renames the temporary file over the target.
// On an error the target is left as it was.
func (f *File) Commit() error {
	if f.direct {
		if err := f.File.Close(); err != nil {
			return fmt.Errorf("%s: %w", f.target, err)
		}
		return nil
	}
	defer live.Delete(f.Name())
	err := f.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), f.mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), f.target)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("%s: %w", f.target, err)
	}
	return nil
}

// Abort drops what was written: the target is left as it was.
func (f *File) Abort() {
	f.File.Close()
	if !f.direct {
		os.Remove(f.Name())
		live.Delete(f.Name())
	}
}

// Write writes path through Create and Commit, once write has succeeded;
// on any error the target is left as it was.
func Write(path string, write func(io.Writer) error) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Abort()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Commit()
}

// WriteBytes writes b to path as Write does.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// Resolve follows symlinks at path, also one whose target does not exist
// yet, and returns the file that writing path would replace.
func Resolve(path string) (string, error) {
	for range 40 { // as the kernel's limit on links followed
		st, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(path), link)
		}
		path = link
	}
	return "", fmt.Errorf("too many levels of symbolic links")
}

func tempPrefix(target string) string { return "." + filepath.Base(target) + ".tmp-" }

// CleanTemps removes the temporary files of path that a killed process
// left behind (those this process is writing stay).
func CleanTemps(path string) {
	target, err := Resolve(path)
	if err != nil {
		return
	}
	dir, prefix := filepath.Dir(target), tempPrefix(target)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := filepath.Join(dir, e.Name())
		if _, busy := live.Load(name); busy || !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		os.Remove(name)
	}
}

// NotInput refuses an output that is the same file as one of the inputs
// (through links or another name): writing it would destroy the input.
// Empty names and files that do not exist are skipped.
func NotInput(out string, inputs ...string) error {
	if out == "" {
		return nil
	}
	ost, err := os.Stat(out)
	if err != nil || !ost.Mode().IsRegular() {
		return nil
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		if ist, err := os.Stat(in); err == nil && os.SameFile(ost, ist) {
			return fmt.Errorf("%s: the output is the input %s: refusing to overwrite it", out, in)
		}
	}
	return nil
}

// WriteJSON writes v as indented JSON (and a newline) to path, atomically.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteBytes(path, append(b, '\n'))
}
