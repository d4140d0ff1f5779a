package pipeline

import (
	"testing"

	"github.com/confclip/confclip/train"
)

// TestTrainDefaultsAgree: a Go caller of train.DefaultConfig() gets the same
// ratio clip band as the [train] table's defaults (TRL's 0.2, epsilon_high
// 0 = epsilon), not a zero-width band that clips every ratio off exactly 1.
func TestTrainDefaultsAgree(t *testing.T) {
	got, want := train.DefaultConfig(), TrainerConfig(DefaultConfig())
	if got.EpsLow != want.EpsLow || got.EpsHigh != want.EpsHigh {
		t.Errorf("train.DefaultConfig() clip band %g/%g, the [train] table's %g/%g", got.EpsLow, got.EpsHigh, want.EpsLow, want.EpsHigh)
	}
	if got.EpsLow <= 0 {
		t.Errorf("train.DefaultConfig() EpsLow %g: want a band of positive width", got.EpsLow)
	}
}
