package pipeline

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadConfigUnknownKey(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ file, want string }{
		{"[rollout]\ngroup = 4\ntemprature = 0.7\n", "unknown key rollout.temprature"},
		{"[rollout]\ngroup = 4\n[rollouts]\ngroup = 4\n", "rollouts.group"},
		{"steps = 3\n", "unknown key steps"},
	} {
		path := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadConfig(%q): %v, want an error naming %s and the file", tc.file, err, tc.want)
		}
	}
	cfg, err := LoadConfig("")
	if err != nil || !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Errorf("LoadConfig(\"\") = %+v, %v; want the defaults", cfg, err)
	}
}
