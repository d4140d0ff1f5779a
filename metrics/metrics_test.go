package metrics

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testMetrics makes n steps of plausible metrics, held-out accuracy every
// other step and no right answers in step 1.
func testMetrics(n int) []Step {
	rows := make([]Step, n)
	for i := range rows {
		s := float64(i + 1)
		m := Step{
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
func sameMetrics(a, b Step) bool {
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
	var back Step
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
	l, err := OpenLog(dir, -1)
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
	back, err := Read(filepath.Join(dir, JSONLFile))
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

	f, err := os.Open(filepath.Join(dir, CSVFile))
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
	wantHeader := "step,accuracy,eval_accuracy,eval_mean_tokens,mean_reward,reward_std,zero_std_frac,zero_std_frac_binary,mean_tokens,mean_tokens_right,mean_tokens_wrong,loss,grad_norm,lr,clip_frac,kl,updates,train_skipped,train_zero_weight,group_std_mean,std_filter,std_filtered,rollout_s,score_s,train_s,step_s,tokens_per_s,teacher_forced,workers,retries"
	if got := strings.Join(recs[0], ","); got != wantHeader {
		t.Errorf("CSV header\n got %s\nwant %s", got, wantHeader)
	}
	if got := strings.Join(recs[1], ","); got != "1,0.1,,,-0.4,0.3,0.5,0.8,39,,44,1,0.7,0,0,0,0,0,0,0,0,0,1.5,0.01,2,3.6,1234.5,0,0,0" {
		t.Errorf("CSV row 1: %s", got)
	}
	if recs[2][2] != "0.28" {
		t.Errorf("CSV row 2 eval_accuracy %q, want 0.28", recs[2][2])
	}
}

func TestMetricsLogResume(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, -1)
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
	path := filepath.Join(dir, JSONLFile)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step":6,"accu`)
	f.Close()

	l, err = OpenLog(dir, 3)
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
	back, err := Read(path)
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
	b, _ := os.ReadFile(filepath.Join(dir, CSVFile))
	if n := strings.Count(string(b), "\n"); n != 7 {
		t.Errorf("CSV has %d lines after resume, want 7", n)
	}
	// Resuming past everything keeps everything; a fresh run keeps nothing.
	for _, tc := range []struct{ last, want int }{{100, 6}, {-1, 0}} {
		l, err := OpenLog(dir, tc.last)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(l.Rows()); n != tc.want {
			t.Errorf("OpenLog(last step %d): %d rows, want %d", tc.last, n, tc.want)
		}
		l.Close()
	}
}
