package dataset

import "testing"

func TestConfigHashCanonical(t *testing.T) {
	a, err := ConfigHash([]byte(`{"model":{"path":"m.gguf","ctx":2048},"seed":18446744073709551615}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ConfigHash([]byte("{\n  \"seed\": 18446744073709551615,\n  \"model\": {\"ctx\": 2048, \"path\": \"m.gguf\"}\n}"))
	c, _ := ConfigHash([]byte(`{"model":{"path":"m.gguf","ctx":2048},"seed":18446744073709551614}`))
	if a != b || a == c || len(a) != 64 {
		t.Errorf("hashes %s %s %s: want the first two equal, the third different", a, b, c)
	}
	if _, err := ConfigHash([]byte(`{"a":`)); err == nil {
		t.Error("ConfigHash accepted broken JSON")
	}
}
