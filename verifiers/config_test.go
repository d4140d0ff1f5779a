package verifiers

import (
	"bytes"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/confclip/confclip/internal/settings"
)

// TestConfigTOML: the [verifier] table's keys are Options' own, inline
// beside name, both ways: a file's keys land in Options, and the table is
// written back flat (a run folder's config.toml).
func TestConfigTOML(t *testing.T) {
	var f struct {
		Verifier Config `toml:"verifier"`
	}
	f.Verifier = DefaultConfig()
	md, err := toml.Decode("[verifier]\nname = \"exact\"\ntimeout_ms = 5\nstrict = true\nextractors = [\"boxed\"]\n", &f)
	if err != nil {
		t.Fatal(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		t.Fatalf("undecoded keys %v", und)
	}
	v := f.Verifier
	if v.Name != "exact" || v.TimeoutMS != 5 || !v.strict() || len(v.Extractors) != 1 || v.MaxBytes != DefaultMaxBytes {
		t.Fatalf("decoded %+v", v)
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(f); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[verifier]", "timeout_ms = 5", "strict = true", `name = "exact"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("encoded table lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "Options") {
		t.Errorf("encoded table nests Options:\n%s", buf.String())
	}
}

// TestChecks: the defaults pass; each bad value is refused by its key.
func TestChecks(t *testing.T) {
	if err := settings.Run(DefaultConfig(), Checks()); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for key, mod := range map[string]func(*Config){
		"verifier.name":       func(c *Config) { c.Name = "maths" },
		"verifier.timeout_ms": func(c *Config) { c.TimeoutMS = 0 },
		"verifier.max_bytes":  func(c *Config) { c.MaxBytes = -1 },
		"verifier.rel_tol":    func(c *Config) { c.RelTol = 2 },
		"verifier.abs_tol":    func(c *Config) { c.AbsTol = -1e-3 },
		"verifier:":           func(c *Config) { c.Extractors = []string{"nowhere"} },
	} {
		c := DefaultConfig()
		mod(&c)
		err := settings.Run(c, Checks())
		if err == nil || !strings.HasPrefix(err.Error(), key) {
			t.Errorf("%s: got %v", key, err)
		}
	}
}
