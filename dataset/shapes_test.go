package dataset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each shape, written by hand as a user would have it, maps onto the same
// prompt fields; the shape line names the mapping.
func TestReadPromptsShapes(t *testing.T) {
	cases := []struct {
		name, text string
		m          FieldMap
		shape      string
		want       []Prompt
	}{
		{"confclip", `{"id":"a","prompt":"1+1=","answer":"2"}` + "\n" + `{"messages":[{"role":"user","content":"2+2="}],"answer":4}`,
			FieldMap{}, "read as confclip jsonl",
			[]Prompt{{ID: "a", Prompt: "1+1=", Answer: "2"}, {ID: "2", Messages: []Message{{"user", "2+2="}}, Answer: "4"}}},
		{"trl standard", `{"prompt":"1+1=","solution":"2"}` + "\n\n" + `{"prompt":"3+3=","completion":" 6"}`,
			FieldMap{}, "read as trl standard jsonl",
			[]Prompt{{ID: "1", Prompt: "1+1=", Answer: "2"}, {ID: "3", Prompt: "3+3=", Answer: " 6"}}},
		{"trl conversational", `{"prompt":[{"role":"system","content":"Be brief."},{"role":"user","content":"1+1?"}],"completion":[{"role":"assistant","content":"2"}]}`,
			FieldMap{}, "read as trl conversational jsonl",
			[]Prompt{{ID: "1", Messages: []Message{{"system", "Be brief."}, {"user", "1+1?"}}, Answer: "2"}}},
		{"gsm8k", `{"question":"Tom has 70 apples and buys 2. How many?","answer":"70 + 2 = <<70+2=72>>72\n#### 72"}` + "\n" + `{"question":"big","answer":"so\n#### 1,000"}`,
			FieldMap{}, "read as gsm8k jsonl",
			[]Prompt{{ID: "1", Prompt: "Tom has 70 apples and buys 2. How many?", Answer: "72"}, {ID: "2", Prompt: "big", Answer: "1000"}}},
		{"math", `{"problem":"What is $\\frac{1}{2}+\\frac{1}{2}$?","solution":"We add: $\\boxed{\\frac{2}{2}}$, so $\\boxed{1}$.","level":"Level 1","type":"Algebra"}`,
			FieldMap{}, "read as math jsonl",
			[]Prompt{{ID: "1", Prompt: `What is $\frac{1}{2}+\frac{1}{2}$?`, Answer: "1", Meta: map[string]any{"level": "Level 1", "type": "Algebra"}}}},
		{"math-500", `{"problem":"p","solution":"s \\boxed{x}","answer":"\\frac{1}{2}","unique_id":"test/algebra/1.json"}`,
			FieldMap{}, "read as math jsonl",
			[]Prompt{{ID: "test/algebra/1.json", Prompt: "p", Answer: `\frac{1}{2}`}}},
		{"mapped", `{"q":"1+1=","sol":"it is \\boxed{2}","key":17}`,
			FieldMap{Prompt: "q", Answer: "sol:boxed", ID: "key"}, "read as mapped jsonl",
			[]Prompt{{ID: "17", Prompt: "1+1=", Answer: "2"}}},
		{"mapped over a shape", `{"question":"q?","answer":"x\n#### 5","final":"five"}`,
			FieldMap{Answer: "final"}, "read as gsm8k (mapped) jsonl",
			[]Prompt{{ID: "1", Prompt: "q?", Answer: "five"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pf, err := ReadPrompts(writeFile(t, "p.jsonl", c.text), c.m, false)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(pf.Shape, c.shape) {
				t.Errorf("shape %q, want prefix %q", pf.Shape, c.shape)
			}
			if len(pf.Prompts) != len(c.want) {
				t.Fatalf("%d prompts, want %d", len(pf.Prompts), len(c.want))
			}
			for i, w := range c.want {
				g := pf.Prompts[i]
				if g.ID != w.ID || g.Prompt != w.Prompt || g.Answer != w.Answer || len(g.Messages) != len(w.Messages) {
					t.Errorf("prompt %d = %+v, want %+v", i, g, w)
				}
				for j := range w.Messages {
					if g.Messages[j] != w.Messages[j] {
						t.Errorf("prompt %d message %d = %+v, want %+v", i, j, g.Messages[j], w.Messages[j])
					}
				}
				for k, v := range w.Meta {
					if g.Meta[k] != v {
						t.Errorf("prompt %d meta %s = %v, want %v", i, k, g.Meta[k], v)
					}
				}
			}
		})
	}
}

func TestReadPromptsNoShape(t *testing.T) {
	_, err := ReadPrompts(writeFile(t, "p.jsonl", `{"text":"hi","label":3}`), FieldMap{}, false)
	if err == nil {
		t.Fatal("a file of no known shape was read")
	}
	for _, want := range []string{"p.jsonl", "label, text", "verl (", "gsm8k (", "trl standard (", "--map"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestReadPromptsBadRecord(t *testing.T) {
	text := `{"question":"a","answer":"x #### 1"}` + "\n" + `{"question":"b","answer":"no marker"}` + "\n"
	path := writeFile(t, "g.jsonl", text)
	if _, err := ReadPrompts(path, FieldMap{}, false); err == nil || !strings.Contains(err.Error(), "g.jsonl:2") || !strings.Contains(err.Error(), "####") {
		t.Errorf("error %v: want line 2 and the missing ####", err)
	}
	pf, err := ReadPrompts(path, FieldMap{}, true)
	if err != nil || len(pf.Prompts) != 1 || len(pf.Skipped) != 1 {
		t.Errorf("skipBad: %d prompts, %d skipped, %v", len(pf.Prompts), len(pf.Skipped), err)
	}
}

func TestParseFieldMap(t *testing.T) {
	m, err := ParseFieldMap("prompt=question, answer=solution:boxed")
	if err != nil || m.Prompt != "question" || m.Answer != "solution:boxed" {
		t.Errorf("%+v %v", m, err)
	}
	for _, bad := range []string{"prompt", "title=x", "answer="} {
		if _, err := ParseFieldMap(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLastBoxed(t *testing.T) {
	for in, want := range map[string]string{
		`so \boxed{\frac{1}{2}}.`:      `\frac{1}{2}`,
		`\boxed{1} then \boxed{{2}^3}`: `{2}^3`,
		`\fbox{7}`:                     "7",
		`\boxed 5$.`:                   "5",
	} {
		if got, ok := LastBoxed(in); !ok || got != want {
			t.Errorf("LastBoxed(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := LastBoxed(`\boxed{open`); ok {
		t.Error("an unclosed box gave an answer")
	}
}

// confclip's own prompts may come without an answer (generation only).
func TestReadPromptsNoAnswer(t *testing.T) {
	pf, err := ReadPrompts(writeFile(t, "p.jsonl", `{"id":"s1","prompt":"Once upon a time"}`+"\n"+`{"id":"s2","prompt":"x","answer":""}`), FieldMap{}, false)
	if err != nil || len(pf.Prompts) != 2 || pf.Prompts[0].Answer != "" {
		t.Fatalf("%+v %v", pf, err)
	}
}

// No record, whatever its fields and types, makes the prompt reader panic.
func FuzzReadPrompts(f *testing.F) {
	for _, s := range []string{
		`{"prompt":[{"role":"user","content":"q"}],"reward_model":{"ground_truth":3},"extra_info":{"index":1}}`,
		`{"question":"q","answer":"x #### 5"}`,
		`{"problem":"p","solution":"\\boxed{\\frac{1}{2}}"}`,
		`{"prompt":"p","completion":[{"role":"assistant","content":[{"type":"text","text":"a"}]}]}`,
	} {
		f.Add(s, "")
	}
	f.Add(`{"a":{"b":[1,{"c":2}]}}`, "prompt=a.b,answer=a.b.c:boxed")
	f.Fuzz(func(t *testing.T, line, m string) {
		fm, err := ParseFieldMap(m)
		if err != nil {
			return
		}
		path := filepath.Join(t.TempDir(), "p.jsonl")
		if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		pf, err := ReadPrompts(path, fm, true)
		if err != nil {
			return
		}
		for _, p := range pf.Prompts {
			if p.ID == "" || p.Prompt == "" && len(p.Messages) == 0 {
				t.Fatalf("prompt %+v read without an id or a prompt", p)
			}
		}
	})
}
