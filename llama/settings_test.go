package llama_test

import (
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
)

// TestContextSettingNames: flash attention and KV cache types read back
// from their names, "" is the default, an unknown name is refused with the
// known ones.
func TestContextSettingNames(t *testing.T) {
	for _, f := range []llama.FlashAttn{llama.FlashAttnAuto, llama.FlashAttnOn, llama.FlashAttnOff} {
		if back, err := llama.ParseFlashAttn(f.String()); err != nil || back != f {
			t.Errorf("flash attention %v reads back as %v, %v", f, back, err)
		}
	}
	if f, err := llama.ParseFlashAttn(""); err != nil || f != llama.FlashAttnAuto {
		t.Errorf(`"": %v, %v; want auto`, f, err)
	}
	if _, err := llama.ParseFlashAttn("yes"); err == nil || !strings.Contains(err.Error(), "auto, on or off") {
		t.Errorf("yes: %v", err)
	}
	for _, k := range []llama.KVType{llama.KVDefault, llama.KVF32, llama.KVF16, llama.KVBF16, llama.KVQ8_0, llama.KVQ4_0, llama.KVQ4_1, llama.KVQ5_0, llama.KVQ5_1} {
		if back, err := llama.ParseKVType(k.String()); err != nil || back != k {
			t.Errorf("KV type %v reads back as %v, %v", k, back, err)
		}
	}
	if _, err := llama.ParseKVType("q3_k"); err == nil || !strings.Contains(err.Error(), "q8_0") {
		t.Errorf("q3_k: %v", err)
	}
}

// TestContextSettingsOutOfRange: NewContext refuses a flash attention or
// KV cache value that is none of the named ones, before llama.cpp sees it.
func TestContextSettingsOutOfRange(t *testing.T) {
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, p := range []llama.ContextParams{
		{NCtx: 256, FlashAttn: llama.FlashAttn(7)},
		{NCtx: 256, TypeK: llama.KVType(-1)},
		{NCtx: 256, TypeV: llama.KVType(42)},
	} {
		if c, err := llama.NewContext(m, p); err == nil {
			c.Close()
			t.Errorf("%+v: accepted", p)
		}
	}
}
