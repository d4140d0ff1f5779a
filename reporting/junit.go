package reporting

import (
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"

	"github.com/confclip/confclip/pipeline"
)

// WriteJUnit writes the evaluation as a JUnit XML report, one test case per
// prompt: a wrong answer is a failure, a prompt that could not be generated
// an error. CI servers (GitLab, Jenkins, GitHub's test reporters) display it.
func WriteJUnit(w io.Writer, res pipeline.EvalResult) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		File      string   `xml:"file,attr"`
		Line      int      `xml:"line,attr"`
		Failure   *failure `xml:"failure,omitempty"`
		Error     *failure `xml:"error,omitempty"`
	}
	type suite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Errors   int        `xml:"errors,attr"`
		Time     string     `xml:"time,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	s := suite{Name: "confclip eval " + res.Data, Tests: len(res.Cases), Time: fmt.Sprintf("%.3f", res.Seconds)}
	for _, c := range res.Cases {
		tc := testcase{Name: c.ID, Classname: filepath.Base(res.Data), File: res.Data, Line: c.Line}
		switch {
		case c.Error != "":
			s.Errors++
			tc.Error = &failure{Message: "not generated: " + c.Error, Type: "generation", Text: fmt.Sprintf("%s:%d: %s", res.Data, c.Line, c.Error)}
		case !c.Correct:
			s.Failures++
			tc.Failure = &failure{Message: fmt.Sprintf("want %q, extracted %q", c.Answer, c.Extracted), Type: "wrong answer",
				Text: fmt.Sprintf("%s:%d\nreason: %s\ncompletion: %s", res.Data, c.Line, c.Reason, c.Text)}
		}
		s.Cases = append(s.Cases, tc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
