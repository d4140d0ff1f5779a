package llama_test

import (
	"testing"

	"github.com/confclip/confclip/internal/testutil"
)

// tinyPath is the generated test model, written once per test binary.
var tinyPath string

func TestMain(m *testing.M) { testutil.Main(m, &tinyPath) }

func sharedModels(t testing.TB) string { return testutil.SharedModels(t) }
