package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/tools"
)

// TestGenModelShape: gen-model --shape writes a real model's layout,
// quantized, leaving no F32 copy; a shape with another architecture, or an
// unknown one, is refused naming what it takes.
func TestGenModelShape(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "smollm2.gguf")
	if code, msg := runOut(t, "gen-model", "--shape", "smollm2-135m", "--quantize", "q8_0", "--out", out); code != 0 {
		t.Fatalf("gen-model --shape: status %d: %s", code, msg)
	}
	fi, err := tools.Inspect(out, false)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Info.Params != 134_515_008 || fi.Info.FileType != "Q8_0" || fi.Info.Vocab != 49152 || fi.Info.Layers != 30 {
		t.Errorf("smollm2-135m: %d parameters, %s, vocabulary %d, %d layers; want SmolLM2-135M's 134,515,008, Q8_0, 49,152, 30",
			fi.Info.Params, fi.Info.FileType, fi.Info.Vocab, fi.Info.Layers)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shape", "qwen3-0.6b", "--arch", "qwen2"}, "give --shape alone"},
		{[]string{"--shape", "qwen3-0.6b", "--size", "bench"}, "give --shape alone"},
		{[]string{"--shape", "qwen9-7b"}, "qwen2.5-0.5b"},
	} {
		bad := filepath.Join(dir, "bad.gguf")
		code, msg := runOut(t, append(append([]string{"gen-model"}, tc.args...), "--out", bad)...)
		if code == 0 || !strings.Contains(msg, tc.want) {
			t.Errorf("gen-model %v: status %d, %q; want a refusal saying %q", tc.args, code, msg, tc.want)
		}
		if _, err := os.Stat(bad); err == nil {
			t.Errorf("gen-model %v wrote %s", tc.args, bad)
		}
	}
}
