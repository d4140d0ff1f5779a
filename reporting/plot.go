package reporting

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/scoring"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// metric is one metrics.Step column as a plotted series.
type metric struct {
	name  string // the JSON name, used in file names
	label string // legend and axis text
	get   func(metrics.Step) float64
}

var (
	metricAccuracy = metric{"accuracy", "train accuracy (sampled)", func(m metrics.Step) float64 { return m.Accuracy }}
	metricEval     = metric{"eval_accuracy", "held-out accuracy (greedy)", func(m metrics.Step) float64 {
		if m.EvalAccuracy == nil {
			return math.NaN()
		}
		return *m.EvalAccuracy
	}}
	metricReward      = metric{"mean_reward", "mean reward", func(m metrics.Step) float64 { return m.MeanReward }}
	metricZeroStd     = metric{"zero_std_frac", "zero-std groups (chosen reward)", func(m metrics.Step) float64 { return m.ZeroStdFrac }}
	metricZeroStdBin  = metric{"zero_std_frac_binary", "zero-std groups (binary reward)", func(m metrics.Step) float64 { return m.ZeroStdFracBinary }}
	metricTokens      = metric{"mean_tokens", "mean tokens (all)", func(m metrics.Step) float64 { return m.MeanTokens }}
	metricTokensRight = metric{"mean_tokens_right", "mean tokens (right)", func(m metrics.Step) float64 { return m.MeanTokensRight }}
	metricTokensWrong = metric{"mean_tokens_wrong", "mean tokens (wrong)", func(m metrics.Step) float64 { return m.MeanTokensWrong }}
	metricLoss        = metric{"loss", "loss", func(m metrics.Step) float64 { return m.Loss }}
)

// chart is one PNG: a title, a y-axis label, a y range ([0, 0] = fit the
// data) and the series drawn on it.
type chart struct {
	file, title, y string
	ymin, ymax     float64
	series         []metric
}

// runCharts are the plots Plot draws for one run.
var runCharts = []chart{
	{"accuracy.png", "Accuracy: sampled training completions, greedy held-out prompts", "fraction right", 0, 1, []metric{metricAccuracy, metricEval}},
	{"reward.png", "Mean reward of sampled training completions: %s", "reward", 0, 0, []metric{metricReward}},
	{"zero_std.png", "Training groups whose rewards are all equal (no gradient)", "fraction of groups", 0, 1, []metric{metricZeroStd, metricZeroStdBin}},
	{"tokens.png", "Length of the sampled training completions", "tokens", 0, 0, []metric{metricTokens, metricTokensRight, metricTokensWrong}},
	{"loss.png", "Training loss (the policy-gradient objective)", "loss", 0, 0, []metric{metricLoss}},
}

// compareCharts are the metrics PlotCompare draws, one PNG each.
var compareCharts = []chart{
	{"compare_eval_accuracy.png", "Held-out accuracy (greedy), per arm", "fraction right", 0, 1, []metric{metricEval}},
	{"compare_accuracy.png", "Accuracy of the sampled training completions, per arm", "fraction right", 0, 1, []metric{metricAccuracy}},
	{"compare_mean_tokens.png", "Length of the sampled training completions, per arm", "tokens", 0, 0, []metric{metricTokens}},
	{"compare_mean_reward.png", "Mean reward of the sampled training completions (each arm's own reward)", "reward", 0, 0, []metric{metricReward}},
	{"compare_zero_std_frac.png", "Training groups whose rewards are all equal, per arm (its own reward)", "fraction of groups", 0, 1, []metric{metricZeroStd}},
}

// Plot size.
const (
	plotWidth  = 6 * vg.Inch
	plotHeight = 4 * vg.Inch
)

// Plot draws a run's metrics against the step as PNG files in dir:
// accuracy.png (train and held-out), reward.png, zero_std.png (chosen and
// binary reward), tokens.png (all, right and wrong completions) and
// loss.png. reward.png's title names the reward (RewardName; "" says "the
// run's reward"). Missing values (NaN, steps without an evaluation) are
// left out. It returns the files' paths.
func Plot(rows []metrics.Step, dir, reward string) ([]string, error) {
	var paths []string
	for _, c := range runCharts {
		p := c.withReward(reward).newPlot()
		for i, m := range c.series {
			if err := addSeries(p, m.label, i, points(rows, m)); err != nil {
				return paths, err
			}
		}
		path := filepath.Join(dir, c.file)
		if err := savePNG(p, path); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// PlotCompare draws experiment arms side by side, one PNG per metric in dir
// (compare_eval_accuracy.png, compare_accuracy.png, compare_mean_tokens.png,
// compare_mean_reward.png, compare_zero_std_frac.png) with one line per arm;
// an arm keeps its colour across the files. It returns the files' paths.
func PlotCompare(arms map[string][]metrics.Step, dir string) ([]string, error) {
	names := make([]string, 0, len(arms))
	for name := range arms {
		names = append(names, name)
	}
	slices.Sort(names)
	var paths []string
	for _, c := range compareCharts {
		p := c.newPlot()
		for i, name := range names {
			if err := addSeries(p, name, i, points(arms[name], c.series[0])); err != nil {
				return paths, err
			}
		}
		path := filepath.Join(dir, c.file)
		if err := savePNG(p, path); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// withReward fills the reward's name into a title that has a place for it.
func (c chart) withReward(reward string) chart {
	if strings.Contains(c.title, "%s") {
		if reward == "" {
			reward = "the run's reward"
		}
		c.title = fmt.Sprintf(c.title, reward)
	}
	return c
}

// RewardName is how the plots name a reward configuration: the method,
// confclip's weighting, and the format and overlong terms when on, as in
// "confclip relative + format 0.1".
func RewardName(r scoring.RewardConfig) string {
	name := r.Method
	if r.Method == "confclip" && r.Weight != "" {
		name += " " + r.Weight
	}
	if r.FormatWeight > 0 {
		name += fmt.Sprintf(" + format %g", r.FormatWeight)
	}
	if r.Overlong {
		name += " + overlong"
	}
	return name
}

func (c chart) newPlot() *plot.Plot {
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = "step"
	p.Y.Label.Text = c.y
	if c.ymin < c.ymax {
		p.Y.Min, p.Y.Max = c.ymin, c.ymax
	}
	p.Add(plotter.NewGrid())
	return p
}

// points are the (step, value) pairs of one metric, missing values left out.
func points(rows []metrics.Step, m metric) plotter.XYs {
	var xys plotter.XYs
	for _, r := range rows {
		if y := m.get(r); !math.IsNaN(y) && !math.IsInf(y, 0) {
			xys = append(xys, plotter.XY{X: float64(r.Step), Y: y})
		}
	}
	return xys
}

// addSeries draws xys as a line with points in the i'th style, with a
// legend entry; an empty series gets neither.
func addSeries(p *plot.Plot, name string, i int, xys plotter.XYs) error {
	if len(xys) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
	s.Color, s.Shape = plotutil.Color(i), plotutil.Shape(i)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// savePNG renders p (layout) and writes it to path atomically.
func savePNG(p *plot.Plot, path string) error {
	c := vgimg.PngCanvas{Canvas: vgimg.New(plotWidth, plotHeight)}
	layout(p, draw.New(c))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := c.WriteTo(w)
		return err
	})
}

// layout draws p on dc so that a reader can trust it: the axes padded
// beyond the data (no marker on the frame's edge, none cut off), and the
// legend in a strip below the axes, never over the data. It returns the
// areas of the plot and of the legend.
func layout(p *plot.Plot, dc draw.Canvas) (plotArea, legendArea vg.Rectangle) {
	padAxis(&p.X, 0.5)
	padAxis(&p.Y, 0)
	leg := p.Legend
	p.Legend = plot.NewLegend() // none inside the axes
	const pad = vg.Length(6)
	h := leg.Rectangle(dc).Size().Y
	if h > 0 {
		h += 2 * pad
	}
	pc := draw.Crop(dc, 0, 0, h, 0)
	p.Draw(pc)
	if h > 0 {
		leg.Left, leg.Top = true, true
		lc := draw.Crop(dc, 4*pad, 0, pad, h-pad-dc.Size().Y)
		leg.Draw(lc)
		legendArea = lc.Rectangle
	}
	p.Legend = leg
	return pc.Rectangle, legendArea
}

// padAxis widens an axis by 4% of its range on each side (at least by
// least, and by 0.05 for a range of one value).
func padAxis(a *plot.Axis, least float64) {
	if math.IsInf(a.Min, 0) || math.IsInf(a.Max, 0) || a.Min > a.Max {
		return // no data: gonum draws the empty axis
	}
	r := a.Max - a.Min
	d := max(0.04*r, least)
	if d == 0 {
		d = 0.05 * max(math.Abs(a.Max), 1)
	}
	a.Min, a.Max = a.Min-d, a.Max+d
}

// RunPlots draws confclip run's charts of a run's metrics into dir (a
// pipeline.RunPlotter).
func RunPlots(cfg pipeline.Config, rows []metrics.Step, dir string) ([]string, error) {
	return Plot(rows, dir, RewardName(cfg.Reward))
}
