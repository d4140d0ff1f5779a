package main

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// TestHelpShowsAccepts: a config flag's help says what Validate accepts
// for its key, from the same table as docs/config.md.
func TestHelpShowsAccepts(t *testing.T) {
	want := map[string]string{"group": "at most 4096", "top-p": "a value in (0, 1]", "temperature": "0 (greedy) or more"}
	for _, f := range samplingFlags() {
		name := f.Names()[0]
		w, ok := want[name]
		if !ok {
			continue
		}
		delete(want, name)
		var usage string
		switch f := f.(type) {
		case *cli.IntFlag:
			usage = f.Usage
		case *cli.FloatFlag:
			usage = f.Usage
		}
		if !strings.Contains(usage, "accepts") || !strings.Contains(usage, w) {
			t.Errorf("--%s: %q does not say it accepts %q", name, usage, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("flags not found: %v", want)
	}
}
