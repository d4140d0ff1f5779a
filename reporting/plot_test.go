package reporting

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/scoring"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// testMetrics makes n steps of plausible metrics, held-out accuracy every
// other step and no right answers in step 1.
func testMetrics(n int) []metrics.Step {
	rows := make([]metrics.Step, n)
	for i := range rows {
		s := float64(i + 1)
		m := metrics.Step{
			Step: i + 1, Accuracy: s / 10, MeanReward: -0.5 + 0.1*s, RewardStd: 0.3,
			ZeroStdFrac: 0.5 / s, ZeroStdFracBinary: 0.8 / math.Sqrt(s),
			MeanTokens: 40 - s, MeanTokensRight: 30 - s, MeanTokensWrong: 45 - s,
			Loss: 1 / s, GradNorm: 0.7, RolloutS: 1.5, ScoreS: 0.01, TrainS: 2, StepS: 3.6, TokensPerS: 1234.5,
		}
		if i%2 == 1 {
			acc := 0.2 + 0.04*s
			m.EvalAccuracy = &acc
		}
		if i == 0 {
			m.MeanTokensRight = math.NaN()
		}
		rows[i] = m
	}
	return rows
}

// checkPNGs decodes each file as a PNG of a plausible size.
func checkPNGs(t *testing.T, paths []string, want int) {
	t.Helper()
	if len(paths) != want {
		t.Fatalf("%d plots, want %d: %v", len(paths), want, paths)
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s: %v pixels", p, b)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(paths[0]), ".*tmp*"))
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestPlot(t *testing.T) {
	for _, n := range []int{0, 1, 20} {
		dir := t.TempDir()
		paths, err := Plot(testMetrics(n), dir, "binary")
		if err != nil {
			t.Fatalf("%d steps: %v", n, err)
		}
		checkPNGs(t, paths, len(runCharts))
		if filepath.Base(paths[0]) != "accuracy.png" {
			t.Errorf("first plot %s, want accuracy.png", paths[0])
		}
	}
}

func TestPlotCompare(t *testing.T) {
	binary := testMetrics(10)
	for i := range binary {
		binary[i].MeanTokens += 5
	}
	arms := map[string][]metrics.Step{"confclip": testMetrics(10), "binary": binary, "empty": nil}
	dir := t.TempDir()
	paths, err := PlotCompare(arms, dir)
	if err != nil {
		t.Fatal(err)
	}
	checkPNGs(t, paths, len(compareCharts))
	for _, want := range []string{"compare_eval_accuracy.png", "compare_mean_tokens.png"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Error(err)
		}
	}
}

// TestPlotLayout: the legend lies below the axes (not over the data) and
// inside the image, and the axes reach past the data, so that the last
// step's marker is neither on the frame nor cut off.
func TestPlotLayout(t *testing.T) {
	var rows []metrics.Step
	for s := range 5 {
		r := metrics.Missing()
		r.Step, r.Accuracy, r.MeanReward = s, float64(s)/4, float64(s) // the last point is the largest
		rows = append(rows, r)
	}
	// reward.png's title names the reward; every title fits the image.
	cfg := pipeline.DefaultConfig()
	for _, r := range []scoring.RewardConfig{cfg.Reward, {Method: "binary"}, {Method: "confclip", Weight: "absolute", FormatWeight: 0.1, Overlong: true}} {
		name := RewardName(r)
		title := runCharts[1].withReward(name).title
		if !strings.HasPrefix(name, r.Method) || !strings.HasSuffix(title, ": "+name) {
			t.Errorf("reward %+v: name %q, title %q", r, name, title)
		}
		p := runCharts[1].withReward(name).newPlot()
		if w := p.Title.TextStyle.Width(p.Title.Text); w > plotWidth {
			t.Errorf("title %q is %v wide, the image %v", p.Title.Text, w, plotWidth)
		}
	}
	if got := RewardName(scoring.RewardConfig{Method: "confclip", Weight: "relative", FormatWeight: 0.1}); got != "confclip relative + format 0.1" {
		t.Errorf("RewardName: %q", got)
	}
	for _, c := range append(append([]chart{}, runCharts...), compareCharts...) {
		p := c.withReward("confclip relative + format 0.1 + overlong").newPlot()
		if w := p.Title.TextStyle.Width(p.Title.Text); w > plotWidth {
			t.Errorf("%s: title %q is %v wide, the image %v", c.file, p.Title.Text, w, plotWidth)
		}
	}
	for _, c := range runCharts[:2] {
		p := c.withReward("binary").newPlot()
		for i, m := range c.series {
			if err := addSeries(p, m.label, i, points(rows, m)); err != nil {
				t.Fatal(err)
			}
		}
		img := vgimg.New(plotWidth, plotHeight)
		dc := draw.New(img)
		plotArea, legendArea := layout(p, dc)
		if legendArea.Size().Y <= 0 || legendArea.Max.Y > plotArea.Min.Y || legendArea.Min.Y < dc.Min.Y || legendArea.Max.X > dc.Max.X {
			t.Errorf("%s: legend %v, plot %v, image %v", c.file, legendArea, plotArea, dc.Rectangle)
		}
		if !(p.X.Max > 4 && p.X.Min < 0 && p.Y.Max > maxY(rows, c.series)) {
			t.Errorf("%s: axes x %v..%v, y %v..%v do not reach past the data", c.file, p.X.Min, p.X.Max, p.Y.Min, p.Y.Max)
		}
	}
}

func maxY(rows []metrics.Step, ms []metric) float64 {
	m := math.Inf(-1)
	for _, r := range rows {
		for _, s := range ms {
			if y := s.get(r); !math.IsNaN(y) {
				m = max(m, y)
			}
		}
	}
	return m
}
