package pipeline

import (
	"fmt"

	"github.com/parquet-go/parquet-go"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
)

// Export layouts: which columns a training set has and what they are
// called. LayoutConfclip is what confclip train reads; LayoutTRL and
// LayoutVerl name the columns as those projects' code does, so that their
// loaders read the file without conversion code (docs/export.md maps each
// column).
const (
	LayoutConfclip = "confclip"
	LayoutTRL      = "trl"
	LayoutVerl     = "verl"
)

// Schemas of the other layouts' rows: a JSONL row of either says what it
// is, and ReadTrainExamples refuses it by name.
const (
	SchemaTrainTRL  = "confclip.train.trl/v1"
	SchemaTrainVerl = "confclip.train.verl/v1"
)

// trlRow is one completion under the names of TRL's GRPOTrainer batch
// (prompt_ids, completion_ids, completion_mask, advantages,
// old_per_token_logps) and of its datasets (prompt, completion; solution for
// its accuracy reward; label for KTO).
type trlRow struct {
	Schema   string `json:"schema" parquet:"schema"`
	PromptID string `json:"prompt_id" parquet:"prompt_id"`
	Sample   int    `json:"sample" parquet:"sample"`
	// Prompt is the prompt as the user gave it in JSONL: the messages of a
	// conversational prompt (TRL's conversational format), else the text;
	// PromptText, the rendered text, is Parquet's prompt column.
	Prompt           any       `json:"prompt" parquet:"-"`
	PromptText       string    `json:"-" parquet:"prompt"`
	Completion       string    `json:"completion" parquet:"completion"`
	Solution         string    `json:"solution" parquet:"solution"`
	Label            bool      `json:"label" parquet:"label"`
	PromptIDs        []int32   `json:"prompt_ids" parquet:"prompt_ids,list"`
	CompletionIDs    []int32   `json:"completion_ids" parquet:"completion_ids,list"`
	CompletionMask   []int32   `json:"completion_mask" parquet:"completion_mask,list"`
	Advantages       float64   `json:"advantages" parquet:"advantages"`
	OldPerTokenLogps []float64 `json:"old_per_token_logps" parquet:"old_per_token_logps,list"`
	Reward           float64   `json:"reward" parquet:"reward"`
}

// verlRewardModel is verl's reward_model column, as its data preprocessing
// writes it and its reward managers read it.
type verlRewardModel struct {
	GroundTruth string `json:"ground_truth" parquet:"ground_truth"`
	Style       string `json:"style" parquet:"style"`
}

// verlRow is one completion under the names of verl's DataProto batch
// (prompts, responses, response_mask, input_ids, attention_mask,
// position_ids, old_log_probs, advantages, returns, token_level_scores,
// token_level_rewards) and non-tensor batch (uid groups a prompt's
// responses for GRPO; data_source, reward_model), with the text beside it.
type verlRow struct {
	Schema            string          `json:"schema" parquet:"schema"`
	UID               string          `json:"uid" parquet:"uid"`
	Sample            int             `json:"sample" parquet:"sample"`
	DataSource        string          `json:"data_source" parquet:"data_source"`
	ExtraInfo         map[string]any  `json:"extra_info,omitempty" parquet:"-"` // the prompt's, in JSONL
	Prompt            string          `json:"prompt" parquet:"prompt"`
	Response          string          `json:"response" parquet:"response"`
	RewardModel       verlRewardModel `json:"reward_model" parquet:"reward_model"`
	Prompts           []int32         `json:"prompts" parquet:"prompts,list"`
	Responses         []int32         `json:"responses" parquet:"responses,list"`
	ResponseMask      []int32         `json:"response_mask" parquet:"response_mask,list"`
	InputIDs          []int32         `json:"input_ids" parquet:"input_ids,list"`
	AttentionMask     []int32         `json:"attention_mask" parquet:"attention_mask,list"`
	PositionIDs       []int32         `json:"position_ids" parquet:"position_ids,list"`
	OldLogProbs       []float64       `json:"old_log_probs" parquet:"old_log_probs,list"`
	Advantages        []float64       `json:"advantages" parquet:"advantages,list"`
	Returns           []float64       `json:"returns" parquet:"returns,list"`
	TokenLevelScores  []float64       `json:"token_level_scores" parquet:"token_level_scores,list"`
	TokenLevelRewards []float64       `json:"token_level_rewards" parquet:"token_level_rewards,list"`
}

func toTRL(ex dataset.TrainExample, correct bool) trlRow {
	var prompt any = ex.Prompt
	if len(ex.Messages) > 0 {
		prompt = ex.Messages
	}
	return trlRow{Schema: SchemaTrainTRL, PromptID: ex.PromptID, Sample: ex.Sample, Prompt: prompt, PromptText: ex.Prompt, Completion: ex.Completion,
		Solution: ex.Answer, Label: correct, PromptIDs: ex.PromptIDs, CompletionIDs: ex.CompletionIDs, CompletionMask: ex.CompletionMask,
		Advantages: ex.Advantage, OldPerTokenLogps: ex.OldLogprobs, Reward: ex.Reward}
}

func toVerl(ex dataset.TrainExample) verlRow {
	np, n := len(ex.PromptIDs), len(ex.CompletionIDs)
	ids := append(append(make([]int32, 0, np+n), ex.PromptIDs...), ex.CompletionIDs...)
	attn, pos := make([]int32, np+n), make([]int32, np+n)
	for i := range attn {
		attn[i], pos[i] = 1, int32(i)
	}
	// verl puts the sequence's score on its last response token.
	scores := make([]float64, n)
	if n > 0 {
		scores[n-1] = ex.Reward
	}
	// verl picks its reward function by data_source: the user's is kept.
	source := "confclip"
	if s, ok := ex.Meta["data_source"].(string); ok && s != "" {
		source = s
	}
	extra, _ := ex.Meta["extra_info"].(map[string]any)
	return verlRow{Schema: SchemaTrainVerl, UID: ex.PromptID, Sample: ex.Sample, DataSource: source, ExtraInfo: extra,
		Prompt: ex.Prompt, Response: ex.Completion, RewardModel: verlRewardModel{GroundTruth: ex.Answer, Style: "rule"},
		Prompts: ex.PromptIDs, Responses: ex.CompletionIDs, ResponseMask: ex.CompletionMask, InputIDs: ids, AttentionMask: attn,
		PositionIDs: pos, OldLogProbs: ex.OldLogprobs, Advantages: ex.Advantages, Returns: ex.Advantages,
		TokenLevelScores: scores, TokenLevelRewards: scores}
}

// layoutWriter writes one layout's rows in one file format.
type layoutWriter struct {
	layout string
	jsonl  *dataset.Writer
	pq     interface {
		write(ex dataset.TrainExample, correct bool) error
		commit() error
		abort()
	}
}

func (w *layoutWriter) Write(ex dataset.TrainExample, correct bool) error {
	if w.jsonl != nil {
		switch w.layout {
		case LayoutTRL:
			return w.jsonl.Write(toTRL(ex, correct))
		case LayoutVerl:
			return w.jsonl.Write(toVerl(ex))
		}
		return w.jsonl.Write(ex)
	}
	return w.pq.write(ex, correct)
}

func (w *layoutWriter) Commit() error {
	if w.jsonl != nil {
		return w.jsonl.Commit()
	}
	return w.pq.commit()
}

func (w *layoutWriter) Abort() {
	if w.jsonl != nil {
		w.jsonl.Abort()
		return
	}
	w.pq.abort()
}

func checkLayout(layout string) (string, error) {
	switch layout {
	case "", LayoutConfclip:
		return LayoutConfclip, nil
	case LayoutTRL, LayoutVerl:
		return layout, nil
	}
	return "", fmt.Errorf("export layout %q: want %s, %s or %s", layout, LayoutConfclip, LayoutTRL, LayoutVerl)
}

func createLayoutWriter(path, format, layout string) (*layoutWriter, error) {
	w := &layoutWriter{layout: layout}
	if format != FormatParquet {
		jw, err := dataset.Create(path)
		if err != nil {
			return nil, err
		}
		w.jsonl = jw
		return w, nil
	}
	var err error
	switch layout {
	case LayoutTRL:
		w.pq, err = newPQ(path, layout, func(ex dataset.TrainExample, c bool) trlRow { return toTRL(ex, c) })
	case LayoutVerl:
		w.pq, err = newPQ(path, layout, func(ex dataset.TrainExample, _ bool) verlRow { return toVerl(ex) })
	default:
		w.pq, err = newPQ(path, layout, func(ex dataset.TrainExample, _ bool) dataset.TrainExample { return ex })
	}
	if err != nil {
		return nil, err
	}
	return w, nil
}

// pqWriter writes Parquet (zstd) rows of type T to a temporary file beside
// the target, renamed into place on commit.
type pqWriter[T any] struct {
	path string
	f    *atomicfile.File
	pw   *parquet.GenericWriter[T]
	conv func(dataset.TrainExample, bool) T
	row  [1]T
}

// metaLayout is the Parquet key-value metadata key that names the layout.
const metaLayout = "confclip.layout"

func newPQ[T any](path, layout string, conv func(dataset.TrainExample, bool) T) (*pqWriter[T], error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	pw := parquet.NewGenericWriter[T](f,
		parquet.Compression(&parquet.Zstd),
		parquet.KeyValueMetadata("confclip.schema", dataset.SchemaTrain),
		parquet.KeyValueMetadata(metaLayout, layout))
	return &pqWriter[T]{path: path, f: f, pw: pw, conv: conv}, nil
}

func (w *pqWriter[T]) write(ex dataset.TrainExample, correct bool) error {
	w.row[0] = w.conv(ex, correct)
	if _, err := w.pw.Write(w.row[:]); err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	return nil
}

func (w *pqWriter[T]) commit() error {
	if err := w.pw.Close(); err != nil {
		w.f.Abort()
		return fmt.Errorf("%s: %w", w.path, err)
	}
	return w.f.Commit()
}

func (w *pqWriter[T]) abort() { w.f.Abort() }
