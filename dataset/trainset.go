package dataset

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// Export formats.
const (
	FormatJSONL   = "jsonl"
	FormatParquet = "parquet"
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

// TRLRow (LayoutTRL) is one completion under the names of TRL's GRPOTrainer batch
// (prompt_ids, completion_ids, completion_mask, advantages,
// old_per_token_logps) and of its datasets (prompt, completion; solution for
// its accuracy reward; label for KTO).
type TRLRow struct {
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

// VerlRewardModel is verl's reward_model column, as its data preprocessing
// writes it and its reward managers read it.
type VerlRewardModel struct {
	GroundTruth string `json:"ground_truth" parquet:"ground_truth"`
	Style       string `json:"style" parquet:"style"`
}

// VerlRow (LayoutVerl) is one completion under the names of verl's DataProto batch
// (prompts, responses, response_mask, input_ids, attention_mask,
// position_ids, old_log_probs, advantages, returns, token_level_scores,
// token_level_rewards) and non-tensor batch (uid groups a prompt's
// responses for GRPO; data_source, reward_model), with the text beside it.
type VerlRow struct {
	Schema            string          `json:"schema" parquet:"schema"`
	UID               string          `json:"uid" parquet:"uid"`
	Sample            int             `json:"sample" parquet:"sample"`
	DataSource        string          `json:"data_source" parquet:"data_source"`
	ExtraInfo         map[string]any  `json:"extra_info,omitempty" parquet:"-"` // the prompt's, in JSONL
	Prompt            string          `json:"prompt" parquet:"prompt"`
	Response          string          `json:"response" parquet:"response"`
	RewardModel       VerlRewardModel `json:"reward_model" parquet:"reward_model"`
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

// ToTRL is an example as a TRL row; correct is its verifier verdict.
func ToTRL(ex TrainExample, correct bool) TRLRow {
	var prompt any = ex.Prompt
	if len(ex.Messages) > 0 {
		prompt = ex.Messages
	}
	return TRLRow{Schema: SchemaTrainTRL, PromptID: ex.PromptID, Sample: ex.Sample, Prompt: prompt, PromptText: ex.Prompt, Completion: ex.Completion,
		Solution: ex.Answer, Label: correct, PromptIDs: ex.PromptIDs, CompletionIDs: ex.CompletionIDs, CompletionMask: ex.CompletionMask,
		Advantages: ex.Advantage, OldPerTokenLogps: ex.OldLogprobs, Reward: ex.Reward}
}

// ToVerl is an example as a verl row.
func ToVerl(ex TrainExample) VerlRow {
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
	return VerlRow{Schema: SchemaTrainVerl, UID: ex.PromptID, Sample: ex.Sample, DataSource: source, ExtraInfo: extra,
		Prompt: ex.Prompt, Response: ex.Completion, RewardModel: VerlRewardModel{GroundTruth: ex.Answer, Style: "rule"},
		Prompts: ex.PromptIDs, Responses: ex.CompletionIDs, ResponseMask: ex.CompletionMask, InputIDs: ids, AttentionMask: attn,
		PositionIDs: pos, OldLogProbs: ex.OldLogprobs, Advantages: ex.Advantages, Returns: ex.Advantages,
		TokenLevelScores: scores, TokenLevelRewards: scores}
}

// TrainWriter writes a training set: one layout's rows in one file format,
// atomically (Commit renames it into place; Abort leaves nothing).
type TrainWriter struct {
	layout string
	jsonl  *Writer
	pq     ParquetWriter
}

// Write adds one example; correct is its verifier verdict (TRL's label).
func (w *TrainWriter) Write(ex TrainExample, correct bool) error {
	if w.jsonl != nil {
		switch w.layout {
		case LayoutTRL:
			return w.jsonl.Write(ToTRL(ex, correct))
		case LayoutVerl:
			return w.jsonl.Write(ToVerl(ex))
		}
		return w.jsonl.Write(ex)
	}
	return w.pq.Write(ex, correct)
}

// Commit finishes the file and renames it into place.
func (w *TrainWriter) Commit() error {
	if w.jsonl != nil {
		return w.jsonl.Commit()
	}
	return w.pq.Commit()
}

// Abort removes the partial file.
func (w *TrainWriter) Abort() {
	if w.jsonl != nil {
		w.jsonl.Abort()
		return
	}
	w.pq.Abort()
}

// CheckLayout returns the layout a name stands for ("" is LayoutConfclip).
func CheckLayout(layout string) (string, error) {
	switch layout {
	case "", LayoutConfclip:
		return LayoutConfclip, nil
	case LayoutTRL, LayoutVerl:
		return layout, nil
	}
	return "", fmt.Errorf("export layout %q: want %s, %s or %s", layout, LayoutConfclip, LayoutTRL, LayoutVerl)
}

// CreateTrainWriter starts a training set at path in format (FormatJSONL or
// FormatParquet) and layout.
func CreateTrainWriter(path, format, layout string) (*TrainWriter, error) {
	w := &TrainWriter{layout: layout}
	if format != FormatParquet {
		jw, err := Create(path)
		if err != nil {
			return nil, err
		}
		w.jsonl = jw
		return w, nil
	}
	c, err := parquetCodec(path)
	if err != nil {
		return nil, err
	}
	if w.pq, err = c.CreateTrain(path, layout); err != nil {
		return nil, err
	}
	return w, nil
}

// parquetMagic opens and closes every Parquet file.
var parquetMagic = []byte("PAR1")

// ReadTrainExamples reads a training set written by Export, in either format
// (Parquet is recognised by its magic bytes, whatever the file's name).
// JSONL records of another schema are refused with their file and line.
func ReadTrainExamples(path string) ([]TrainExample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	head := make([]byte, len(parquetMagic))
	_, rerr := io.ReadFull(f, head) // a file shorter than the magic is not Parquet
	f.Close()
	if rerr == nil && bytes.Equal(head, parquetMagic) {
		c, err := parquetCodec(path)
		if err != nil {
			return nil, err
		}
		return c.ReadTrainExamples(path)
	}
	exs, lines, _, err := ReadFile[TrainExample](path, false)
	if err != nil {
		return nil, err
	}
	for i, ex := range exs {
		if ex.Schema != "" && ex.Schema != SchemaTrain {
			err := fmt.Errorf("schema %q: want %q", ex.Schema, SchemaTrain)
			if ex.Schema == SchemaTrainTRL || ex.Schema == SchemaTrainVerl {
				err = fmt.Errorf("schema %q: an export for another trainer; export again without --format trl|verl for confclip train", ex.Schema)
			}
			return nil, &LineError{File: path, Line: lines[i], Err: err}
		}
	}
	return exs, nil
}

// MetaLayout is the Parquet key-value metadata key that names the layout.
const MetaLayout = "confclip.layout"

// ParquetCodec reads and writes this package's Parquet files. Package
// dataset/parquetio implements it and registers itself when linked in.
type ParquetCodec interface {
	// ReadRows reads every row of a Parquet file as a generic object
	// (nested structs as objects, lists as []any), whatever its schema.
	ReadRows(path string) ([]map[string]any, error)
	// ReadTrainExamples reads a training set written in LayoutConfclip.
	ReadTrainExamples(path string) ([]TrainExample, error)
	// CreateTrain starts a training set in a layout, written atomically.
	CreateTrain(path, layout string) (ParquetWriter, error)
}

// ParquetWriter writes one training set's rows.
type ParquetWriter interface {
	Write(ex TrainExample, correct bool) error
	Commit() error
	Abort()
}

var registered ParquetCodec

// RegisterParquet makes c the codec for Parquet files.
func RegisterParquet(c ParquetCodec) { registered = c }

// parquetCodec is the registered codec, or an error naming the file when
// this program was built without one.
func parquetCodec(path string) (ParquetCodec, error) {
	if registered == nil {
		return nil, fmt.Errorf("%s: Parquet, and this program was built without Parquet support (import github.com/confclip/confclip/dataset/parquetio)", path)
	}
	return registered, nil
}
