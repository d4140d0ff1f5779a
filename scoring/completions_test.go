package scoring_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/scoring"
)

// OpenAI responses that cannot be scored say why, naming file and line.
func TestScoreOpenAIErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	resp := `{"object":"text_completion","choices":[{"index":0,"text":" 2"},{"index":1,"text":" 3"}]}`
	prompts := write("p.jsonl", `{"id":"q1","prompt":"1+1=","answer":"2"}`+"\n")
	cases := []struct {
		name, data, prompts, want string
	}{
		{"bare without prompts", write("bare.jsonl", resp+"\n"), "", "bare.jsonl:1: the response does not say which prompt it answers"},
		{"more responses than prompts", write("two.jsonl", resp+"\n"+resp+"\n"), prompts, "two.jsonl:2: response 2 has no prompt"},
		{"unknown custom_id", write("batch.jsonl", `{"custom_id":"q9","response":{"status_code":200,"body":`+resp+`}}`+"\n"), prompts, `prompt "q9" is not in`},
		{"failed request", write("fail.jsonl", `{"custom_id":"q1","response":{"status_code":429,"body":{"error":"rate"}}}`+"\n"), prompts, "fail.jsonl:1: the request failed with status 429"},
		{"no answer", write("noans.jsonl", `{"prompt_id":"x","response":`+resp+`}`+"\n"), "", `prompt "x": no reference answer`},
		{"confidence without log-probs", write("nolp.jsonl", resp+"\n"), prompts, "no log-probs"},
	}
	for _, tc := range cases {
		o := testOptions(tc.data, filepath.Join(dir, "out.jsonl"))
		o.Prompts = tc.prompts
		if !strings.HasPrefix(tc.name, "confidence") {
			o.Reward.Method = "binary"
		}
		_, err := scoring.Score(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// The bare response answers the one prompt in order and scores.
	o := testOptions(write("ok.jsonl", resp+"\n"), filepath.Join(dir, "ok-out.jsonl"))
	o.Prompts, o.Reward.Method = prompts, "binary"
	sum, err := scoring.Score(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Groups != 1 || sum.Records != 2 {
		t.Errorf("%d groups, %d records; want one group of 2", sum.Groups, sum.Records)
	}
	if got := readScored(t, o.Out); got[0].PromptID != "q1" || got[0].Answer != "2" || got[1].Sample != 1 {
		t.Errorf("scored %+v", got)
	}
}
