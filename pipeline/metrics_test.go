package pipeline

import (
	"encoding/csv"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/confclip/confclip/confclip"
)

// testMetrics makes n steps of plausible metrics, held-out accuracy every
// other step and no right answers in step 1.
func testMetrics(n int) []StepMetrics {
	rows := make([]StepMetrics, n)
	for i := range rows {
		s := float64(i + 1)
		m := StepMetrics{
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

// sameMetrics compares two rows, NaN equal to NaN.
func sameMetrics(a, b StepMetrics) bool {
	return reflect.DeepEqual(a.cells(), b.cells())
}

func TestMetricsJSON(t *testing.T) {
	rows := testMetrics(2)
	b, err := json.Marshal(rows[0])
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, `{"step":1,"accuracy":0.1,"mean_reward":-0.4,`) || !strings.Contains(s, `"mean_tokens_right":null`) || strings.Contains(s, "eval_accuracy") {
		t.Errorf("step 1 as JSON: %s", s)
	}
	var back StepMetrics
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !sameMetrics(back, rows[0]) || back.EvalAccuracy != nil {
		t.Errorf("round trip: got %+v, want %+v", back, rows[0])
	}
	b, _ = json.Marshal(rows[1])
	if !strings.Contains(string(b), `"eval_accuracy":0.28`) {
		t.Errorf("step 2 as JSON: %s", b)
	}
	// An old or partial record: what it lacks is missing, not zero.
	if err := json.Unmarshal([]byte(`{"step":3,"accuracy":0.5}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Step != 3 || back.Accuracy != 0.5 || !math.IsNaN(back.Loss) {
		t.Errorf("partial record: %+v", back)
	}
}

func TestMetricsLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenMetricsLog(dir, -1)
	if err != nil {
		t.Fatal(err)
	}
	rows := testMetrics(5)
	for _, m := range rows {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Append(rows[2]); err == nil || !strings.Contains(err.Error(), "step 3 recorded after step 5") {
		t.Errorf("appending step 3 again: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	back, err := ReadMetrics(filepath.Join(dir, MetricsJSONL))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(rows) {
		t.Fatalf("read %d rows, wrote %d", len(back), len(rows))
	}
	for i := range rows {
		if !sameMetrics(back[i], rows[i]) {
			t.Errorf("row %d: read %+v, wrote %+v", i, back[i], rows[i])
		}
	}

	f, err := os.Open(filepath.Join(dir, MetricsCSV))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+len(rows) {
		t.Fatalf("CSV has %d lines, want a header and %d rows", len(recs), len(rows))
	}
	wantHeader := "step,accuracy,eval_accuracy,eval_mean_tokens,mean_reward,reward_std,zero_std_frac,zero_std_frac_binary,mean_tokens,mean_tokens_right,mean_tokens_wrong,loss,grad_norm,lr,clip_frac,kl,updates,train_skipped,rollout_s,score_s,train_s,step_s,tokens_per_s,teacher_forced,workers,retries"
	if got := strings.Join(recs[0], ","); got != wantHeader {
		t.Errorf("CSV header\n got %s\nwant %s", got, wantHeader)
	}
	if got := strings.Join(recs[1], ","); got != "1,0.1,,,-0.4,0.3,0.5,0.8,39,,44,1,0.7,0,0,0,0,0,1.5,0.01,2,3.6,1234.5,0,0,0" {
		t.Errorf("CSV row 1: %s", got)
	}
	if recs[2][2] != "0.28" {
		t.Errorf("CSV row 2 eval_accuracy %q, want 0.28", recs[2][2])
	}
}

func TestMetricsLogResume(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenMetricsLog(dir, -1)
	if err != nil {
		t.Fatal(err)
	}
	rows := testMetrics(6)
	for _, m := range rows[:5] {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	// A crash in the middle of a line, then a resume from the checkpoint of
	// step 3: steps 4 and 5 are redone and must not appear twice.
	path := filepath.Join(dir, MetricsJSONL)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step":6,"accu`)
	f.Close()

	l, err = OpenMetricsLog(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Rows(); len(got) != 3 || got[2].Step != 3 {
		t.Fatalf("after resuming at step 3: %d rows", len(got))
	}
	for _, m := range rows[3:] {
		if err := l.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	back, err := ReadMetrics(path)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, m := range back {
		steps = append(steps, m.Step)
	}
	if !reflect.DeepEqual(steps, []int{1, 2, 3, 4, 5, 6}) {
		t.Errorf("steps after resume: %v", steps)
	}
	b, _ := os.ReadFile(filepath.Join(dir, MetricsCSV))
	if n := strings.Count(string(b), "\n"); n != 7 {
		t.Errorf("CSV has %d lines after resume, want 7", n)
	}
	// Resuming past everything keeps everything; a fresh run keeps nothing.
	for _, tc := range []struct{ last, want int }{{100, 6}, {-1, 0}} {
		l, err := OpenMetricsLog(dir, tc.last)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(l.Rows()); n != tc.want {
			t.Errorf("OpenMetricsLog(last step %d): %d rows, want %d", tc.last, n, tc.want)
		}
		l.Close()
	}
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
	arms := map[string][]StepMetrics{"confclip": testMetrics(10), "binary": binary, "empty": nil}
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

func TestStepMetricsOf(t *testing.T) {
	var s Summary
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

// TestPlotLayout: the legend lies below the axes (not over the data) and
// inside the image, and the axes reach past the data, so that the last
// step's marker is neither on the frame nor cut off.
func TestPlotLayout(t *testing.T) {
	var rows []StepMetrics
	for s := range 5 {
		r := MissingMetrics()
		r.Step, r.Accuracy, r.MeanReward = s, float64(s)/4, float64(s) // the last point is the largest
		rows = append(rows, r)
	}
	// reward.png's title names the reward; every title fits the image.
	cfg := DefaultConfig()
	for _, r := range []RewardConfig{cfg.Reward, {Method: "binary"}, {Method: "confclip", Weight: "absolute", FormatWeight: 0.1, Overlong: true}} {
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
	if got := RewardName(RewardConfig{Method: "confclip", Weight: "relative", FormatWeight: 0.1}); got != "confclip relative + format 0.1" {
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

func maxY(rows []StepMetrics, ms []metric) float64 {
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
