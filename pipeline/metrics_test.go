package pipeline

import (
	"math"
	"testing"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/scoring"
)

func TestStepMetricsOf(t *testing.T) {
	var s scoring.Summary
	s.Outcomes = confclip.OutcomeStatsOf([][]bool{{true, false, false, false}}, [][]int{{10, 30, 20, 40}})
	s.Reward = confclip.RewardStatsOf("confclip", [][]float64{{0.8, -0.9, -0.3, -0.5}})
	s.Binary = confclip.RewardStatsOf("binary", [][]float64{{1, 0, 0, 0}})
	s.Seconds = 0.25
	m := StepMetricsOf(7, s)
	if m.Step != 7 || m.Accuracy != 0.25 || m.ScoreS != 0.25 || m.ZeroStdFrac != 0 || m.ZeroStdFracBinary != 0 {
		t.Errorf("%+v", m)
	}
	if m.MeanTokens != 25 || m.MeanTokensRight != 10 || m.MeanTokensWrong != 30 {
		t.Errorf("mean tokens all/right/wrong %v/%v/%v, want 25/10/30", m.MeanTokens, m.MeanTokensRight, m.MeanTokensWrong)
	}
	if math.Abs(m.MeanReward-(-0.225)) > 1e-12 || !math.IsNaN(m.Loss) || m.EvalAccuracy != nil {
		t.Errorf("%+v", m)
	}
	s.Outcomes = confclip.OutcomeStatsOf([][]bool{{false, false}}, [][]int{{10, 30}})
	if m := StepMetricsOf(8, s); !math.IsNaN(m.MeanTokensRight) || m.MeanTokens != 20 {
		t.Errorf("no right answers: mean tokens right %v (want missing), all %v", m.MeanTokensRight, m.MeanTokens)
	}
}
