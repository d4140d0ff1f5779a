package pipeline

import (
	"reflect"
	"testing"

	"github.com/confclip/confclip/train"
	"github.com/confclip/confclip/verifiers"
)

// TestTablesOwnDefaults: the tables a package owns have that package's
// defaults, so a Go caller of train.DefaultConfig() or
// verifiers.DefaultConfig() gets what a config file without the table
// gets; and the default clip band has a positive width (a zero-width band
// clips every ratio off exactly 1).
func TestTablesOwnDefaults(t *testing.T) {
	cfg := DefaultConfig()
	if got, want := cfg.Train, train.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("[train] defaults %+v, train.DefaultConfig() %+v", got, want)
	}
	if got, want := cfg.Verifier, verifiers.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("[verifier] defaults %+v, verifiers.DefaultConfig() %+v", got, want)
	}
	if cfg.Train.Epsilon <= 0 {
		t.Errorf("train.epsilon %g: want a band of positive width", cfg.Train.Epsilon)
	}
}
