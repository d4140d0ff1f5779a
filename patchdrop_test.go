package confclip

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryPatchDrops: each patch of the cpu and backends layers can be
// left out alone (third_party/patches/README.md): `LLAMA_DROP=N
// scripts/llama-source.sh --check` lays the pinned tree down without it,
// and those that build on it (PATCH_DEPS in scripts/llama-patch.sh), and
// every other patch still applies without fuzz. The pinned source comes
// from pip's cache once `make` has run (else pip downloads it).
func TestEveryPatchDrops(t *testing.T) {
	if testing.Short() {
		t.Skip("NOT RUN: -short (each check lays down a llama.cpp tree)")
	}
	var nums []string
	for _, layer := range []string{"cpu", "backends"} {
		ps, err := filepath.Glob(filepath.Join("third_party", "patches", layer, "*.patch"))
		if err != nil || len(ps) == 0 {
			t.Fatalf("no patches in %s: %v", layer, err)
		}
		for _, p := range ps {
			nums = append(nums, strings.SplitN(filepath.Base(p), "-", 2)[0])
		}
	}
	all := regexp.MustCompile(`llama\.cpp: (\d+) of (\d+) patches apply .* \(left out: ([0-9 ]+)\)`)
	for _, n := range nums {
		cmd := exec.Command("bash", "scripts/llama-source.sh", "--check")
		cmd.Env = append(os.Environ(), "LLAMA_DROP="+n)
		out, err := cmd.CombinedOutput()
		m := all.FindStringSubmatch(string(out))
		if err != nil || m == nil || m[1] != m[2] || strings.Contains(string(out), "failed") {
			t.Errorf("LLAMA_DROP=%s: %v\n%s", n, err, tail(string(out), 15))
			continue
		}
		if left := strings.Fields(m[3]); left[0] != n {
			t.Errorf("LLAMA_DROP=%s left out %v", n, left)
		}
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
