package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWrite: a successful write replaces the file and leaves no temporary
// file; a failed one leaves the old file as it was, names the path, and
// leaves no temporary file either.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.txt")
	if err := WriteBytes(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		w.Write([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) || err.Error() != path+": boom" {
		t.Fatalf("failed write: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("after a failed write the file holds %q", b)
	}
	if err := WriteBytes(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("file holds %q, want new", b)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("%d entries in the folder, want the file alone", len(es))
	}
	if err := WriteBytes(filepath.Join(dir, "no", "such", "dir"), nil); err == nil {
		t.Fatal("a write into a missing folder succeeded")
	}
}

// TestWriteThroughLinksAndDevices: issue 23's data-loss cases. A symlink's
// target is replaced and the link kept; a FIFO and /dev/null are written
// through, not replaced by a regular file.
func TestWriteThroughLinksAndDevices(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.jsonl")
	os.WriteFile(target, []byte("old"), 0o644)
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink("target.jsonl", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteBytes(link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", st.Mode(), err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Fatalf("the link's target holds %q, want new", b)
	}
	// A dangling link: its target is created.
	dangling := filepath.Join(dir, "dangling")
	os.Symlink("made.txt", dangling)
	if err := WriteBytes(dangling, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "made.txt")); string(b) != "x" {
		t.Fatalf("a dangling link's target holds %q", b)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() { b, _ := os.ReadFile(fifo); got <- string(b) }()
	if err := WriteBytes(fifo, []byte("through the pipe")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe" {
		t.Fatalf("the FIFO's reader got %q", s)
	}
	if st, _ := os.Lstat(fifo); st.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced by %v", st.Mode())
	}

	if err := WriteBytes(os.DevNull, []byte("gone")); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(os.DevNull); st.Mode()&fs.ModeDevice == 0 {
		t.Fatalf("%s is now %v", os.DevNull, st.Mode())
	}
	if es, _ := os.ReadDir(dir); len(es) != 5 {
		t.Fatalf("%d entries in the folder, want the 5 made here (no temporary files)", len(es))
	}
}

// TestWriteMode: a new file gets 0666 less the umask (readable by others
// under the usual 022), and a replaced file keeps its mode.
func TestWriteMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "new")
	if err := WriteBytes(path, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if want := 0o666 &^ umask; st.Mode().Perm() != want {
		t.Fatalf("new file mode %v, want %v (umask %v)", st.Mode().Perm(), want, umask)
	}
	os.Chmod(path, 0o640)
	WriteBytes(path, []byte("again"))
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Fatalf("replaced file mode %v, want 0640 kept", st.Mode().Perm())
	}
}

// TestLeftoversRemoved: the temporary files of a killed writer are removed
// when the target is written again; those of a write in progress stay.
func TestLeftoversRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	stale := filepath.Join(dir, ".out.jsonl.tmp-12345")
	other := filepath.Join(dir, ".other.jsonl.tmp-1")
	os.WriteFile(stale, []byte("half"), 0o600)
	os.WriteFile(other, []byte("x"), 0o600)
	inProgress, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer inProgress.Abort()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the leftover is still there: %v", err)
	}
	CleanTemps(path)
	if _, err := os.Stat(inProgress.Name()); err != nil {
		t.Fatalf("the temporary file of a write in progress was removed: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("another file's temporary file was removed: %v", err)
	}
}

// TestNotInput: an output that is an input, by the same name, another name
// or a link, is refused; a distinct or new file is not.
func TestNotInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "data.jsonl")
	os.WriteFile(in, []byte("{}\n"), 0o644)
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(in, link)
	hard := filepath.Join(dir, "hard.jsonl")
	os.Link(in, hard)
	for _, out := range []string{in, link, hard, filepath.Join(dir, ".", "data.jsonl")} {
		if err := NotInput(out, "", in); err == nil {
			t.Errorf("output %s accepted over the input %s", out, in)
		}
	}
	other := filepath.Join(dir, "other.jsonl")
	os.WriteFile(other, nil, 0o644)
	for _, out := range []string{other, filepath.Join(dir, "new.jsonl"), "", os.DevNull} {
		if err := NotInput(out, in); err != nil {
			t.Errorf("output %s: %v", out, err)
		}
	}
}

// TestWriteNamesThePath: a folder that does not exist is reported with the
// file asked for, not the temporary file's name.
func TestWriteNamesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "report.xml")
	err := Write(path, func(w io.Writer) error { return nil })
	if err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), ".tmp-") {
		t.Errorf("err = %v, want one naming %s", err, path)
	}
}
