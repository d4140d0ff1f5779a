package reporting

import (
	"bytes"
	"encoding/xml"
	"testing"

	"github.com/confclip/confclip/pipeline"
)

// TestWriteJUnit: one test case per prompt, a prompt that could not be
// generated an error, a wrong answer a failure.
func TestWriteJUnit(t *testing.T) {
	res := pipeline.EvalResult{Data: "eval.jsonl", Prompts: 4, Correct: 2, Failed: 1, Cases: []pipeline.EvalCase{
		{ID: "a", Line: 1, Correct: true}, {ID: "b", Line: 2, Answer: "x", Extracted: "y"},
		{ID: "long", Line: 3, Error: "does not fit the context"}, {ID: "c", Line: 4, Correct: true}}}
	var buf bytes.Buffer
	if err := WriteJUnit(&buf, res); err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests  int `xml:"tests,attr"`
		Errors int `xml:"errors,attr"`
		Cases  []struct {
			Name  string    `xml:"name,attr"`
			Error *struct{} `xml:"error"`
		} `xml:"testcase"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &suite); err != nil {
		t.Fatalf("JUnit report: %v\n%s", err, buf.String())
	}
	if suite.Tests != 4 || suite.Errors != 1 || len(suite.Cases) != 4 || suite.Cases[2].Error == nil || suite.Cases[2].Name != "long" {
		t.Fatalf("JUnit report:\n%s", buf.String())
	}
	if suite.Cases[1].Error != nil || !bytes.Contains(buf.Bytes(), []byte(`<failure message="want &#34;x&#34;, extracted &#34;y&#34;" type="wrong answer">`)) {
		t.Fatalf("the wrong answer is not a failure:\n%s", buf.String())
	}
}
