package parquetio

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/confclip/confclip/dataset"
)

// TestParquetByteFlips: issue 23's flipped Parquet files. Every one-bit
// flip of a small prompt file is either refused or read as the same rows;
// flips in the footer's column names and page index used to be read as
// other columns or other rows.
func TestParquetByteFlips(t *testing.T) {
	type row struct {
		ID     string `parquet:"id"`
		Prompt string `parquet:"prompt"`
		Answer string `parquet:"answer"`
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf, parquet.Compression(&parquet.Zstd))
	var rows []row
	for i := range 20 {
		rows = append(rows, row{fmt.Sprint(i), fmt.Sprintf("What is %d+%d?", i, i), fmt.Sprint(2 * i)})
	}
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	orig := buf.Bytes()
	dir := t.TempDir()
	path := filepath.Join(dir, "orig.parquet")
	os.WriteFile(path, orig, 0o644)
	want, err := ReadRows(path)
	if err != nil || len(want) != len(rows) {
		t.Fatalf("the valid file: %d rows, %v", len(want), err)
	}
	refused := 0
	for i := range orig {
		b := bytes.Clone(orig)
		b[i] ^= 1
		p := filepath.Join(dir, "flip.parquet")
		os.WriteFile(p, b, 0o644)
		got, err := ReadRows(p)
		if err != nil {
			refused++
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("a flip at byte %d of %d was read as other rows", i, len(orig))
		}
	}
	t.Logf("%d of %d flips refused, the rest read as the same rows", refused, len(orig))
}

// verl's own Parquet layout: prompt as messages, the answer nested in
// reward_model, the id in extra_info.index.
type verlMsg struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}
type verlRow struct {
	DataSource  string    `parquet:"data_source"`
	Prompt      []verlMsg `parquet:"prompt,list"`
	Ability     string    `parquet:"ability"`
	RewardModel struct {
		GroundTruth string `parquet:"ground_truth"`
		Style       string `parquet:"style"`
	} `parquet:"reward_model"`
	ExtraInfo struct {
		Index int64  `parquet:"index"`
		Split string `parquet:"split"`
	} `parquet:"extra_info"`
}

func TestReadPromptsVerlParquet(t *testing.T) {
	var rows []verlRow
	for i, q := range []string{"1+1=", "2+5="} {
		r := verlRow{DataSource: "openai/gsm8k", Prompt: []verlMsg{{"user", q}}, Ability: "math"}
		r.RewardModel.GroundTruth, r.RewardModel.Style = []string{"2", "7"}[i], "rule"
		r.ExtraInfo.Index, r.ExtraInfo.Split = int64(10+i), "train"
		rows = append(rows, r)
	}
	path := filepath.Join(t.TempDir(), "train.parquet")
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	pf, err := dataset.ReadPrompts(path, dataset.FieldMap{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "read as verl parquet: messages=prompt, answer=reward_model.ground_truth"; !strings.HasPrefix(pf.Shape, want) {
		t.Errorf("shape %q, want %q", pf.Shape, want)
	}
	if len(pf.Prompts) != 2 {
		t.Fatalf("%d prompts", len(pf.Prompts))
	}
	p := pf.Prompts[1]
	if p.ID != "11" || p.Answer != "7" || len(p.Messages) != 1 || p.Messages[0].Content != "2+5=" {
		t.Errorf("row 2 = %+v", p)
	}
	if p.Meta["data_source"] != "openai/gsm8k" {
		t.Errorf("data_source not kept in meta: %v", p.Meta)
	}
}
