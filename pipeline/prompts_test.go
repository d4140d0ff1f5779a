package pipeline

import (
	"strings"
	"testing"
)

func TestValidateDataMap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Data.Map = "prompt=question,answer=solution:boxed"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Data.Map = "question=prompt"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "data.map") {
		t.Errorf("a map with an unknown field: %v", err)
	}
}
