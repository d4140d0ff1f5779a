// Package metrics is a run's per-step metrics: the row one step of the run
// loop measured, and the log that keeps the rows in a run folder
// (metrics.jsonl, appended, and metrics.csv, rewritten).
package metrics

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
)

// Step is what one step of the run loop measured; Log writes
// it as one JSON line and one CSV row. A float that could not be measured
// (for example mean_tokens_right in a step with no right answer) is NaN in
// Go, null in JSON and an empty cell in CSV.
type Step struct {
	Step int `json:"step"`
	// Accuracy is the fraction of this step's training rollouts the
	// verifier marked right.
	Accuracy float64 `json:"accuracy"`
	// EvalAccuracy is the greedy accuracy on the held-out prompts; nil in
	// steps without an evaluation.
	EvalAccuracy *float64 `json:"eval_accuracy,omitempty"`
	// EvalMeanTokens is the mean completion length of that evaluation.
	EvalMeanTokens *float64 `json:"eval_mean_tokens,omitempty"`
	// MeanReward, RewardStd and ZeroStdFrac describe the chosen reward over
	// the step's groups (METHOD.md "Group statistics"); ZeroStdFracBinary is
	// the zero-std fraction the binary reward would have had on the same
	// completions.
	MeanReward        float64 `json:"mean_reward"`
	RewardStd         float64 `json:"reward_std"`
	ZeroStdFrac       float64 `json:"zero_std_frac"`
	ZeroStdFracBinary float64 `json:"zero_std_frac_binary"`
	// MeanTokens is the mean completion length in tokens, over all, right
	// and wrong completions.
	MeanTokens      float64 `json:"mean_tokens"`
	MeanTokensRight float64 `json:"mean_tokens_right"`
	MeanTokensWrong float64 `json:"mean_tokens_wrong"`
	// Loss (METHOD.md's L before the first update), GradNorm and LR come
	// from the step's first update; ClipFrac (fraction of tokens whose
	// ratio was clipped) and KL (mean k3 KL to the model without the
	// adapter) are means over its Updates. TrainSkipped is 1 when the step
	// did not train: every advantage was zero (or every completion masked
	// or dropped), so the adapter and the optimiser's moments stayed put.
	Loss         float64 `json:"loss"`
	GradNorm     float64 `json:"grad_norm"`
	LR           float64 `json:"lr"`
	ClipFrac     float64 `json:"clip_frac"`
	KL           float64 `json:"kl"`
	Updates      int     `json:"updates"`
	TrainSkipped int     `json:"train_skipped"`
	// TrainZeroWeight counts the step's completions that no training pass
	// evaluated: a zero advantage (or every token masked) without a KL
	// term carries no gradient (docs/method.md).
	TrainZeroWeight int `json:"train_zero_weight"`
	// GroupStdMean is the mean within-group std of the step's rewards;
	// StdFilter the threshold advantage.std_filter_beta set for the step (0
	// = none) and StdFiltered the groups it left out of training.
	GroupStdMean float64 `json:"group_std_mean"`
	StdFilter    float64 `json:"std_filter"`
	StdFiltered  int     `json:"std_filtered"`
	// Wall-clock seconds of the stages and the whole step, and the rollout
	// throughput in generated tokens per second.
	RolloutS   float64 `json:"rollout_s"`
	ScoreS     float64 `json:"score_s"`
	TrainS     float64 `json:"train_s"`
	StepS      float64 `json:"step_s"`
	TokensPerS float64 `json:"tokens_per_s"`
	// TeacherForced counts the step's records whose log-probs came from a
	// local teacher-forcing pass (records a remote worker sent without
	// them); the others carry the sampler's. Workers counts the remote
	// workers that generated the step's groups (0: the local engine), and
	// Retries the groups sent again to another worker after a failure or
	// a timeout.
	TeacherForced int `json:"teacher_forced"`
	Workers       int `json:"workers"`
	Retries       int `json:"retries"`
}

// columns are Step's JSON names in field order: the CSV header.
var columns = func() []string {
	t := reflect.TypeFor[Step]()
	cols := make([]string, t.NumField())
	for i := range cols {
		cols[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return cols
}()

// cells formats m's fields in column order; "" stands for a missing value
// (a nil pointer, NaN or an infinity).
func (m Step) cells() []string {
	v := reflect.ValueOf(m)
	out := make([]string, v.NumField())
	for i := range out {
		f := v.Field(i)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				continue
			}
			f = f.Elem()
		}
		switch f.Kind() {
		case reflect.Int:
			out[i] = strconv.FormatInt(f.Int(), 10)
		case reflect.Float64:
			if x := f.Float(); !math.IsNaN(x) && !math.IsInf(x, 0) {
				out[i] = strconv.FormatFloat(x, 'g', -1, 64)
			}
		default:
			panic("metrics: Step field of kind " + f.Kind().String())
		}
	}
	return out
}

// MarshalJSON writes the fields in order, a missing float as null and a
// missing evaluation (eval_accuracy, eval_mean_tokens) not at all (encoding/json refuses NaN).
func (m Step) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range m.cells() {
		if c == "" && (columns[i] == "eval_accuracy" || columns[i] == "eval_mean_tokens") {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", columns[i])
		if c == "" {
			c = "null"
		}
		b.WriteString(c)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes; a null or absent float is NaN.
func (m *Step) UnmarshalJSON(b []byte) error {
	type plain Step // without the methods
	p := plain(Missing())
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*m = Step(p)
	return nil
}

// Missing is a Step with every float NaN and no evaluation: a
// starting point in which only what was measured gets set.
func Missing() Step {
	var m Step
	v := reflect.ValueOf(&m).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Float64 {
			f.SetFloat(math.NaN())
		}
	}
	return m
}

// Names of the files Log keeps in a run folder.
const (
	JSONLFile = "metrics.jsonl"
	CSVFile   = "metrics.csv"
)

// Log records a run's per-step metrics in its folder: metrics.jsonl
// gets one line per step, appended in a single write so that a killed run
// never leaves half a record, and metrics.csv is rewritten whole (atomically)
// after each step for spreadsheets and plotting tools.
type Log struct {
	dir  string
	rows []Step
	app  *dataset.Appender
}

// OpenLog opens runDir's metrics for appending. It keeps the rows
// already there for steps up to lastStep and drops later ones, which a
// resumed run is about to redo: a run resuming from the checkpoint of step k
// passes k, a fresh run passes -1.
func OpenLog(runDir string, lastStep int) (*Log, error) {
	path := filepath.Join(runDir, JSONLFile)
	if err := dataset.TruncatePartial(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	rows, err := Read(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	keep := slices.DeleteFunc(slices.Clone(rows), func(m Step) bool { return m.Step > lastStep })
	if len(keep) != len(rows) {
		if err := writeJSONL(path, keep); err != nil {
			return nil, err
		}
	}
	app, err := dataset.OpenAppend(path)
	if err != nil {
		return nil, err
	}
	l := &Log{dir: runDir, rows: keep, app: app}
	if err := l.writeCSV(); err != nil {
		return nil, errors.Join(err, app.Close())
	}
	return l, nil
}

// Append records one step's metrics. Steps must increase.
func (l *Log) Append(m Step) error {
	if n := len(l.rows); n > 0 && m.Step <= l.rows[n-1].Step {
		return fmt.Errorf("%s: step %d recorded after step %d", filepath.Join(l.dir, JSONLFile), m.Step, l.rows[n-1].Step)
	}
	if err := l.app.Write(m); err != nil {
		return err
	}
	l.rows = append(l.rows, m)
	return l.writeCSV()
}

// Rows are the steps recorded so far, kept ones included.
func (l *Log) Rows() []Step { return slices.Clone(l.rows) }

// Close closes metrics.jsonl.
func (l *Log) Close() error { return l.app.Close() }

func (l *Log) writeCSV() error {
	return atomicfile.Write(filepath.Join(l.dir, CSVFile), func(w io.Writer) error {
		return WriteCSV(w, l.rows)
	})
}

// WriteCSV writes a header of the JSON names and one row per step;
// missing values are empty cells.
func WriteCSV(w io.Writer, rows []Step) error {
	cw := csv.NewWriter(w)
	cw.Write(columns)
	for _, m := range rows {
		cw.Write(m.cells())
	}
	cw.Flush()
	return cw.Error()
}

// Read reads a metrics.jsonl file.
func Read(path string) ([]Step, error) {
	rows, _, _, err := dataset.ReadFile[Step](path, false)
	return rows, err
}

func writeJSONL(path string, rows []Step) error {
	w, err := dataset.Create(path)
	if err != nil {
		return err
	}
	for _, m := range rows {
		if err := w.Write(m); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Commit()
}
