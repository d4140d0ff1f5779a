package dataset

import (
	"math"
	"strings"
	"testing"
)

func TestOpenAIChatResponse(t *testing.T) {
	line := `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[` +
		`{"index":0,"message":{"role":"assistant","content":"x = 4"},"finish_reason":"stop","logprobs":{"content":[` +
		`{"token":"x","logprob":-0.5,"bytes":[120],"top_logprobs":[]},{"token":" =","logprob":-0.25,"bytes":[32,61]},{"token":" 4","logprob":-0.1,"bytes":[32,52]}]}},` +
		`{"index":1,"message":{"role":"assistant","content":"5"},"finish_reason":"length","logprobs":null}]}`
	if !IsOpenAILine([]byte(line)) {
		t.Fatal("not recognised")
	}
	rec, err := ParseOpenAILine([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	rec.PromptID, rec.Answer = "p", "4"
	ros, err := rec.Rollouts()
	if err != nil {
		t.Fatal(err)
	}
	if len(ros) != 2 || ros[0].Text != "x = 4" || ros[1].Finish != FinishLength || ros[0].Finish != FinishStop {
		t.Fatalf("rollouts %+v", ros)
	}
	if got := ros[0].Logprobs; len(got) != 3 || got[2] != -0.1 {
		t.Errorf("logprobs %v", got)
	}
	if got := ros[0].TokenOffsets; len(got) != 3 || got[1] != 1 || got[2] != 3 {
		t.Errorf("offsets %v, want [0 1 3]", got)
	}
	if ros[1].Logprobs != nil || ros[1].Sample != 1 {
		t.Errorf("choice 1: %+v", ros[1])
	}
}

func TestOpenAILegacyAndBatch(t *testing.T) {
	legacy := `{"custom_id":"q7","response":{"status_code":200,"body":{"object":"text_completion","choices":[` +
		`{"index":0,"text":" 12","finish_reason":"stop","logprobs":{"tokens":[" 1","2"],"token_logprobs":[-1.5,-0.5],"top_logprobs":null,"text_offset":[10,12]}}]}}}`
	rec, err := ParseOpenAILine([]byte(legacy))
	if err != nil {
		t.Fatal(err)
	}
	if rec.PromptID != "q7" {
		t.Errorf("prompt id %q", rec.PromptID)
	}
	ros, err := rec.Rollouts()
	if err != nil {
		t.Fatal(err)
	}
	if ros[0].Text != " 12" || len(ros[0].Logprobs) != 2 || math.Abs(ros[0].Logprobs[0]+1.5) > 0 || len(ros[0].TokenOffsets) != 2 {
		t.Errorf("%+v", ros[0])
	}

	// vLLM's return_tokens_as_token_ids: the ids are kept.
	ids := `{"prompt_id":"a","answer":"3","prompt":"1+2=","response":{"choices":[{"index":0,"text":"3","logprobs":{"tokens":["token_id:17"],"token_logprobs":[-0.2]}}]}}`
	rec, err = ParseOpenAILine([]byte(ids))
	if err != nil {
		t.Fatal(err)
	}
	ros, err = rec.Rollouts()
	if err != nil || len(ros[0].Tokens) != 1 || ros[0].Tokens[0] != 17 || rec.Answer != "3" || ros[0].Prompt != "1+2=" {
		t.Errorf("%+v %v", ros, err)
	}

	failed := `{"custom_id":"q8","response":{"status_code":500,"body":{"error":"boom"}}}`
	if _, err := ParseOpenAILine([]byte(failed)); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("failed request: %v", err)
	}
	echo := `{"choices":[{"index":0,"text":"ab","logprobs":{"tokens":["a","b"],"token_logprobs":[null,-1]}}]}`
	rec, _ = ParseOpenAILine([]byte(echo))
	if _, err := rec.Rollouts(); err == nil || !strings.Contains(err.Error(), "token 0") {
		t.Errorf("null log-prob: %v", err)
	}
	if IsOpenAILine([]byte(`{"prompt_id":"a","text":"x"}`)) {
		t.Error("a rollout record taken for an OpenAI response")
	}
}

// No line, however malformed, makes the readers panic.
func FuzzOpenAILine(f *testing.F) {
	f.Add([]byte(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"x"}]},"logprobs":{"content":[{"token":"x","logprob":-1,"bytes":[120]}]}}]}`))
	f.Add([]byte(`{"custom_id":"a","response":{"status_code":200,"body":{"choices":[{"index":0,"text":"1","logprobs":{"tokens":["token_id:5"],"token_logprobs":[-0.5]}}]}}}`))
	f.Add([]byte(`{"prompt_id":3,"answer":7,"prompt":[{"role":"user","content":"q"}],"response":{"choices":[]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !IsOpenAILine(b) {
			return
		}
		rec, err := ParseOpenAILine(b)
		if err != nil {
			return
		}
		ros, err := rec.Rollouts()
		if err != nil {
			return
		}
		for _, r := range ros {
			if len(r.TokenOffsets) > 0 && len(r.TokenOffsets) != len(r.Logprobs) {
				t.Fatalf("%d offsets for %d log-probs", len(r.TokenOffsets), len(r.Logprobs))
			}
		}
	})
}
