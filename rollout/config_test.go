package rollout

import (
	"bytes"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/confclip/confclip/internal/settings"
)

// TestOptionsTOML: the [rollout] table is Options' tagged fields, the
// sampling ones inline (temperature, not sampling.temperature), and none
// of the engine's other fields.
func TestOptionsTOML(t *testing.T) {
	var f struct {
		Rollout Options `toml:"rollout"`
	}
	f.Rollout = DefaultOptions()
	md, err := toml.Decode("[rollout]\ngroup = 4\ntemperature = 0.5\ntop_k = 3\nstop = [\"\\n\"]\n", &f)
	if err != nil {
		t.Fatal(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		t.Fatalf("undecoded keys %v", und)
	}
	if o := f.Rollout; o.Group != 4 || o.Temperature != 0.5 || o.TopK != 3 || o.TopP != 1 || len(o.Stop) != 1 {
		t.Fatalf("decoded %+v", o)
	}
	for _, key := range []string{"seq_ctx", "threads", "kv_type", "chat_template", "no_timing"} {
		var g struct {
			Rollout Options `toml:"rollout"`
		}
		if md, err := toml.Decode("[rollout]\n"+key+" = 1\n", &g); err == nil && len(md.Undecoded()) == 0 {
			t.Errorf("[rollout] %s decoded: the engine's own fields are not the table's", key)
		}
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(f); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[rollout]", "group = 4", "temperature = 0.5", "top_k = 3"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("encoded table lacks %q:\n%s", want, buf.String())
		}
	}
	for _, not := range []string{"Params", "SeqCtx", "Threads", "NoTiming"} {
		if strings.Contains(buf.String(), not) {
			t.Errorf("encoded table has %s:\n%s", not, buf.String())
		}
	}
}

// TestOptionsChecks: the defaults pass; a Go caller's zero group and top_p
// are the defaults; each bad value is refused by its key, by NewEngine's
// check as by Validate's.
func TestOptionsChecks(t *testing.T) {
	if err := settings.Run(DefaultOptions(), Checks()); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	var zero Options
	if err := zero.check(); err != nil || zero.Group != DefaultGroup || zero.TopP != 1 {
		t.Fatalf("zero options: %v, %+v", err, zero)
	}
	for key, mod := range map[string]func(*Options){
		"rollout.group":       func(o *Options) { o.Group = MaxGroup + 1 },
		"rollout.max_tokens":  func(o *Options) { o.MaxTokens = -1 },
		"rollout.temperature": func(o *Options) { o.Temperature = -0.5 },
		"rollout.top_p":       func(o *Options) { o.TopP = 1.5 },
		"rollout.min_p":       func(o *Options) { o.MinP = 2 },
		"rollout.parallel":    func(o *Options) { o.Parallel = -1 },
		"rollout.stop":        func(o *Options) { o.Stop = []string{"a", ""} },
	} {
		o := DefaultOptions()
		mod(&o)
		if err := o.check(); err == nil || !strings.HasPrefix(err.Error(), key+":") {
			t.Errorf("%s: got %v", key, err)
		}
	}
}
