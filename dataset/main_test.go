package dataset

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// appendChildEnv makes the test binary a child that appends records to a
// file until a write fails and prints how many succeeded (see
// TestAppenderFullDisk).
const appendChildEnv = "CONFCLIP_TEST_APPEND"

func TestMain(m *testing.M) {
	if path := os.Getenv(appendChildEnv); path != "" {
		a, err := OpenAppend(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		n := 0
		pad := strings.Repeat("x", 700)
		for ; n < 1000; n++ {
			// Pairs of records in one write, as rollout writes a group.
			if err := a.WriteLines([]any{map[string]any{"n": n, "pad": pad}, map[string]any{"n": n, "pad": pad}}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				break
			}
		}
		fmt.Println(n)
		os.Exit(0)
	}
	os.Exit(m.Run())
}
