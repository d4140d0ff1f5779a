package dataset

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestAppenderFullDisk: when the disk fills up (here a file size limit,
// which fails write(2) the same way) in the middle of a group's write, the
// partial group is taken back: the file ends at a group boundary and holds
// exactly the groups whose writes succeeded. It used to keep half a group,
// so that "19 groups written" came with 18 and a half in the file.
func TestAppenderFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	// ulimit -f counts 512-byte blocks in sh (dash) and 1 KiB in bash:
	// either way the limit falls inside some group of about 1.4 KiB.
	cmd := exec.Command("/bin/sh", "-c", `ulimit -f 20 && exec "$0" -test.run='^$'`, os.Args[0])
	cmd.Env = append(os.Environ(), appendChildEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v: %s", err, stderr.String())
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n == 0 || n == 1000 {
		t.Fatalf("child wrote %q groups (stderr %s): the limit did not stop it mid-file", out, stderr.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("the file ends in a partial record (%d bytes)", len(b))
	}
	if lines := bytes.Count(b, []byte("\n")); lines != 2*n {
		t.Fatalf("the file holds %d records, the writer reported %d groups (%d records)", lines, n, 2*n)
	}
	if !strings.Contains(stderr.String(), "file too large") {
		t.Errorf("the error does not say why: %q", stderr.String())
	}
}
