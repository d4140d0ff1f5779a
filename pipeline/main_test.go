package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	// The tests export and read Parquet training sets.
	_ "github.com/confclip/confclip/dataset/parquetio"
)

// runChildEnv makes the test binary a child process that runs one
// `confclip run` from a JSON configuration (see TestRunKilledAtEveryPhase);
// runChildResume makes it resume.
const (
	runChildEnv    = "CONFCLIP_TEST_RUN_CONFIG"
	runChildResume = "CONFCLIP_TEST_RUN_RESUME"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(runChildEnv); path != "" {
		os.Exit(runChild(path, os.Getenv(runChildResume) != ""))
	}
	os.Exit(m.Run())
}

func runChild(path string, resume bool) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := Run(context.Background(), RunOptions{Config: cfg, Resume: resume}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
