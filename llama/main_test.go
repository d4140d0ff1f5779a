package llama_test

import (
	"os"
	"testing"

	"github.com/confclip/confclip/testkit/testutil"
)

// tinyPath is the generated test model, written once per test binary.
var tinyPath string

func TestMain(m *testing.M) {
	if path := os.Getenv(loadChildEnv); path != "" { // FuzzPrecheckGGUF's child
		os.Exit(loadChild(path))
	}
	testutil.Main(m, &tinyPath)
}

func sharedModels(t testing.TB) string { return testutil.SharedModels(t) }
