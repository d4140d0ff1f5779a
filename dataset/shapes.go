package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Prompt files come in the shapes the Python ecosystem prepares them in, not
// only confclip's own. ReadPrompts recognises the shape from the fields of
// the first record, says which it chose (PromptFile.Shape), and maps every
// record onto a Prompt.

// FieldMap names, for each Prompt field, the record field it is read from
// (a dotted path for nested objects: "reward_model.ground_truth"). An answer
// path may end in ":gsm8k" (take what follows "####") or ":boxed" (take the
// last \boxed{...}). Empty entries are left to the recognised shape.
type FieldMap struct {
	ID       string `toml:"id"`
	Prompt   string `toml:"prompt"`   // text, or a list of {role, content} messages
	Messages string `toml:"messages"` // a list of {role, content} messages
	Answer   string `toml:"answer"`
	Verifier string `toml:"verifier"`
}

// IsZero reports whether no field is mapped.
func (m FieldMap) IsZero() bool { return m == FieldMap{} }

// ParseFieldMap reads "prompt=question,answer=solution:boxed".
func ParseFieldMap(s string) (FieldMap, error) {
	var m FieldMap
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return m, fmt.Errorf("--map %q: want FIELD=SOURCE pairs separated by commas (prompt=question,answer=solution)", kv)
		}
		if err := m.set(k, v); err != nil {
			return m, err
		}
	}
	return m, nil
}

func (m *FieldMap) set(k, v string) error {
	switch k {
	case "id":
		m.ID = v
	case "prompt":
		m.Prompt = v
	case "messages":
		m.Messages = v
	case "answer":
		m.Answer = v
	case "verifier":
		m.Verifier = v
	default:
		return fmt.Errorf("--map: unknown field %q (want id, prompt, messages, answer or verifier)", k)
	}
	return nil
}

// String is the map in ParseFieldMap's syntax.
func (m FieldMap) String() string {
	var parts []string
	for _, kv := range [][2]string{{"id", m.ID}, {"prompt", m.Prompt}, {"messages", m.Messages}, {"answer", m.Answer}, {"verifier", m.Verifier}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, ",")
}

// Answer rules: how a gold answer is cut out of a longer field.
const (
	answerGSM8K = "gsm8k" // the text after the last "####"
	answerBoxed = "boxed" // the content of the last \boxed{...} (or \fbox{...})
)

// shape is one known layout of a prompt record.
type shape struct {
	name  string
	match func(rec map[string]any) bool
	m     FieldMap // where each Prompt field comes from
}

// shapes, most specific first. Each names the fields it needs in its
// description (shown when nothing matches).
var shapes = []struct {
	shape
	needs string
}{
	{shape{"confclip", func(r map[string]any) bool {
		// The answer may be absent: prompts for generation only.
		return (isString(r["prompt"]) || isList(r["messages"])) && onlyKeys(r, "schema", "id", "prompt", "messages", "answer", "verifier", "meta")
	}, FieldMap{ID: "id", Prompt: "prompt", Messages: "messages", Answer: "answer", Verifier: "verifier"}},
		"id, prompt (text) or messages, answer"},
	{shape{"verl", func(r map[string]any) bool {
		return isList(r["prompt"]) && lookup(r, "reward_model.ground_truth") != nil
	}, FieldMap{ID: "extra_info.index", Messages: "prompt", Answer: "reward_model.ground_truth"}},
		"prompt (messages), reward_model.ground_truth, data_source, extra_info"},
	{shape{"gsm8k", func(r map[string]any) bool {
		s, ok := r["answer"].(string)
		return isString(r["question"]) && ok && strings.Contains(s, "####")
	}, FieldMap{ID: "id", Prompt: "question", Answer: "answer:" + answerGSM8K}},
		`question, answer ending in "#### <answer>"`},
	{shape{"math", func(r map[string]any) bool {
		return isString(r["problem"]) && (isString(r["answer"]) || strings.Contains(str(r["solution"]), `\boxed`) || strings.Contains(str(r["solution"]), `\fbox`))
	}, FieldMap{ID: "unique_id", Prompt: "problem", Answer: "solution:" + answerBoxed}},
		`problem, solution with \boxed{<answer>} (or answer)`},
	{shape{"trl conversational", func(r map[string]any) bool {
		return isList(r["prompt"]) && firstOf(r, trlAnswers) != ""
	}, FieldMap{ID: "id", Messages: "prompt"}},
		"prompt (messages), solution, ground_truth, answer or completion"},
	{shape{"trl standard", func(r map[string]any) bool {
		return isString(r["prompt"]) && firstOf(r, trlAnswers) != ""
	}, FieldMap{ID: "id", Prompt: "prompt"}},
		"prompt (text), solution, ground_truth, answer or completion"},
}

// trlAnswers are the columns TRL datasets keep the reference in, in order of
// preference (a completion is a reference solution when nothing else is).
var trlAnswers = []string{"solution", "ground_truth", "answer", "completion"}

// PromptFile is what ReadPrompts read.
type PromptFile struct {
	Path    string
	Prompts []Prompt
	// Lines are each prompt's line (JSONL) or row (Parquet, 1-based) number.
	Lines []int
	// Skipped are the records that could not be read (with skipBad).
	Skipped []*LineError
	// Shape says how the file was read: "read as verl parquet:
	// prompt=messages(prompt), answer=reward_model.ground_truth".
	Shape string
	// IDsFromLines counts prompts whose id is their line or row number.
	IDsFromLines int
}

// ReadPrompts reads a prompt file in any known shape, JSONL or Parquet
// (recognised by its magic bytes). The shape is taken from the first
// record's fields unless m maps them; every record is then read the same
// way. A prompt without an id gets its line (or row) number. A file whose
// first record fits no shape is one error naming its fields and the shapes
// it could be. With skipBad, records that cannot be read are listed in
// Skipped instead of stopping the read.
func ReadPrompts(path string, m FieldMap, skipBad bool) (PromptFile, error) {
	pf := PromptFile{Path: path}
	rows, lines, kind, skipped, badText, err := readRows(path, skipBad)
	if err != nil {
		return pf, err
	}
	pf.Skipped = skipped
	if len(rows) == 0 {
		return pf, nil
	}
	sh, err := chooseShape(path, rows[0], m)
	if err != nil {
		return pf, err
	}
	pf.Shape = fmt.Sprintf("read as %s %s: %s", sh.name, kind, describe(sh.m))
	for i, row := range rows {
		p, fromLine, err := sh.prompt(row, lines[i])
		if err == nil && badText[i] != "" {
			p.BadText = badText[i]
		}
		if err != nil {
			le := &LineError{File: path, Line: lines[i], Err: err}
			if !skipBad {
				return pf, le
			}
			pf.Skipped = append(pf.Skipped, le)
			continue
		}
		if fromLine {
			pf.IDsFromLines++
		}
		pf.Prompts = append(pf.Prompts, p)
		pf.Lines = append(pf.Lines, lines[i])
	}
	return pf, nil
}

// chooseShape picks the shape of the first record, or builds one from m.
func chooseShape(path string, first map[string]any, m FieldMap) (shape, error) {
	if !m.IsZero() {
		// A map completes the shape the record otherwise has (or none).
		base := shape{name: "mapped"}
		for _, s := range shapes {
			if s.match(first) {
				base = s.shape
				base.name += " (mapped)"
				break
			}
		}
		for _, f := range []struct {
			dst *string
			v   string
		}{{&base.m.ID, m.ID}, {&base.m.Answer, m.Answer}, {&base.m.Verifier, m.Verifier}} {
			if f.v != "" {
				*f.dst = f.v
			}
		}
		if m.Prompt != "" || m.Messages != "" {
			base.m.Prompt, base.m.Messages = m.Prompt, m.Messages
		}
		if base.m.Prompt == "" && base.m.Messages == "" || base.m.Answer == "" && base.name == "mapped" {
			return base, fmt.Errorf("%s: --map %s: give at least prompt (or messages) and answer for a file of no known shape (fields: %s)", path, m, fieldList(first))
		}
		return base, nil
	}
	for _, s := range shapes {
		if s.match(first) {
			return s.shape, nil
		}
	}
	var cands []string
	for _, s := range shapes {
		cands = append(cands, fmt.Sprintf("%s (%s)", s.name, s.needs))
	}
	return shape{}, fmt.Errorf("%s: the first record's fields [%s] fit no known prompt shape; the shapes are: %s; "+
		"or name the fields with --map prompt=FIELD,answer=FIELD (or map = \"...\" under [data] in the config)",
		path, fieldList(first), strings.Join(cands, "; "))
}

func describe(m FieldMap) string {
	var parts []string
	if m.Messages != "" {
		parts = append(parts, "messages="+m.Messages)
	}
	if m.Prompt != "" {
		parts = append(parts, "prompt="+m.Prompt)
	}
	if m.Answer != "" {
		parts = append(parts, "answer="+m.Answer)
	} else {
		parts = append(parts, "answer="+strings.Join(trlAnswers, "|"))
	}
	if m.ID != "" {
		parts = append(parts, "id="+m.ID+" (else the line or row number)")
	}
	return strings.Join(parts, ", ")
}

// prompt maps one record; fromLine reports that the id is the line number.
func (sh shape) prompt(r map[string]any, line int) (p Prompt, fromLine bool, err error) {
	if sh.m.ID != "" {
		if v := lookup(r, sh.m.ID); v != nil {
			if p.ID, err = scalar(v); err != nil {
				return p, false, fmt.Errorf("id %s: %w", sh.m.ID, err)
			}
		}
	}
	if p.ID == "" {
		p.ID, fromLine = strconv.Itoa(line), true
	}
	if s, ok := r["schema"].(string); ok && sh.name == "confclip" && s != SchemaPrompt {
		return p, false, fmt.Errorf("schema %q, want %q", s, SchemaPrompt)
	}
	// The prompt: text, or messages, from either mapped field.
	for _, path := range []string{sh.m.Messages, sh.m.Prompt} {
		if path == "" {
			continue
		}
		v := lookup(r, path)
		if v == nil {
			continue
		}
		if isList(v) {
			if p.Messages, err = messages(v); err != nil {
				return p, false, fmt.Errorf("%s: %w", path, err)
			}
		} else if s, ok := v.(string); ok {
			p.Prompt = s
		} else {
			return p, false, fmt.Errorf("%s is a %s: want text or a list of {role, content} messages", path, typeName(v))
		}
		break
	}
	if p.Prompt == "" && len(p.Messages) == 0 {
		// A bad prompt, not a bad file (docs/rollout.md): the engine reports
		// it for this prompt only, and eval counts it as wrong.
		p.BadText = fmt.Sprintf("empty prompt (no text in %s)", orJoin(sh.m.Messages, sh.m.Prompt))
	}
	if p.Answer, err = sh.answer(r); err != nil {
		return p, false, err
	}
	if sh.m.Verifier != "" {
		if v, ok := lookup(r, sh.m.Verifier).(string); ok {
			p.Verifier = v
		}
	}
	// Fields the shape does not map go under meta (verl's data_source and
	// extra_info, a user's own), so that the exports can carry them.
	p.Meta = extraFields(r, sh.m)
	return p, fromLine, nil
}

// answer reads the gold answer, cutting it out of a solution where the
// shape's rule says so.
func (sh shape) answer(r map[string]any) (string, error) {
	if sh.m.Answer == "" { // TRL: the first reference column present
		for _, k := range trlAnswers {
			if v := r[k]; v != nil {
				s, err := answerText(v)
				if err != nil {
					return "", fmt.Errorf("%s: %w", k, err)
				}
				if s != "" {
					return s, nil
				}
			}
		}
		return "", fmt.Errorf("no reference answer (none of %s)", strings.Join(trlAnswers, ", "))
	}
	path, rule, _ := strings.Cut(sh.m.Answer, ":")
	if sh.name == "math" || strings.HasPrefix(sh.name, "math ") {
		// MATH variants that carry the answer on its own use it as it is.
		if s, ok := r["answer"].(string); ok && s != "" && path == "solution" {
			return s, nil
		}
	}
	v := lookup(r, path)
	if v == nil && sh.name == "confclip" {
		return "", nil // scoring says so, if the file is scored
	}
	if v == nil {
		return "", fmt.Errorf("no reference answer (%s is missing)", path)
	}
	s, err := answerText(v)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	switch rule {
	case "":
	case answerGSM8K:
		i := strings.LastIndex(s, "####")
		if i < 0 {
			return "", fmt.Errorf("%s has no \"####\" before its final answer", path)
		}
		s = strings.ReplaceAll(strings.TrimSpace(s[i+4:]), ",", "")
	case answerBoxed:
		b, ok := LastBoxed(s)
		if !ok {
			return "", fmt.Errorf("%s has no \\boxed{...} answer", path)
		}
		s = b
	default:
		return "", fmt.Errorf("answer rule %q: want %s or %s", rule, answerGSM8K, answerBoxed)
	}
	if strings.TrimSpace(s) == "" && sh.name != "confclip" {
		return "", fmt.Errorf("empty reference answer (%s)", sh.m.Answer)
	}
	return s, nil
}

// answerText is a reference answer as text: a string, a number, or the
// content of a (list of) assistant message(s) as TRL's completion column
// holds it.
func answerText(v any) (string, error) {
	switch x := v.(type) {
	case []any:
		if len(x) > 0 {
			if _, ok := x[0].(map[string]any); !ok {
				return "", fmt.Errorf("a list of %ss: want text, a number, or a list of {role, content} messages", typeName(x[0]))
			}
		}
		ms, err := messages(x)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, m := range ms {
			b.WriteString(m.Content)
		}
		return b.String(), nil
	case map[string]any:
		if c, ok := x["content"].(string); ok {
			return c, nil
		}
		return "", fmt.Errorf("an object without content: want text")
	}
	return scalar(v)
}

// LastBoxed returns the content of the last \boxed{...} or \fbox{...} in s,
// braces balanced.
func LastBoxed(s string) (string, bool) {
	i := max(strings.LastIndex(s, `\boxed`), strings.LastIndex(s, `\fbox`))
	if i < 0 {
		return "", false
	}
	rest := s[i:]
	open := strings.IndexByte(rest, '{')
	if open < 0 {
		// "\boxed 5": the argument is the next token.
		f := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(rest, `\boxed`), `\fbox`))
		if len(f) == 0 {
			return "", false
		}
		return strings.TrimRight(f[0], "$.,"), true
	}
	depth := 0
	for j := open; j < len(rest); j++ {
		switch rest[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return strings.TrimSpace(rest[open+1 : j]), true
			}
		}
	}
	return "", false
}

// extraFields keeps the record's unmapped fields (data_source, extra_info,
// level, type, ...) in meta, so that nothing the user had is lost.
func extraFields(r map[string]any, m FieldMap) map[string]any {
	used := map[string]bool{}
	for _, p := range []string{m.ID, m.Prompt, m.Messages, m.Answer, m.Verifier} {
		p, _, _ = strings.Cut(p, ":")
		// A field read in part (extra_info.index) is kept whole: verl's
		// extra_info goes to the exports as given.
		if !strings.Contains(p, ".") {
			used[p] = true
		}
	}
	if m.Answer == "" {
		for _, k := range trlAnswers {
			used[k] = true
		}
	}
	var meta map[string]any
	for k, v := range r {
		if used[k] || k == "meta" || k == "schema" {
			continue
		}
		if meta == nil {
			meta = map[string]any{}
		}
		meta[k] = v
	}
	if old, ok := r["meta"].(map[string]any); ok {
		if meta == nil {
			meta = map[string]any{}
		}
		for k, v := range old {
			meta[k] = v
		}
	}
	return meta
}

func messages(v any) ([]Message, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("a %s: want a list of {role, content} messages", typeName(v))
	}
	ms := make([]Message, 0, len(list))
	for i, e := range list {
		o, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("message %d is a %s: want {role, content}", i, typeName(e))
		}
		role, _ := o["role"].(string)
		content, err := messageContent(o["content"])
		if role == "" || err != nil {
			return nil, fmt.Errorf("message %d: want a role and text content", i)
		}
		ms = append(ms, Message{Role: role, Content: content})
	}
	if len(ms) == 0 {
		return nil, errors.New("no messages")
	}
	return ms, nil
}

// messageContent is a message's text: a string, or OpenAI's list of parts
// [{type: "text", text}] joined.
func messageContent(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case []any:
		var b strings.Builder
		for _, part := range x {
			o, ok := part.(map[string]any)
			if !ok {
				return "", errors.New("content part is not an object")
			}
			if t, _ := o["type"].(string); t != "" && t != "text" {
				return "", fmt.Errorf("content part of type %q: only text is read", t)
			}
			s, _ := o["text"].(string)
			b.WriteString(s)
		}
		return b.String(), nil
	}
	return "", errors.New("no text content")
}

// lookup follows a dotted path through nested objects; nil when absent.
func lookup(r map[string]any, path string) any {
	if v, ok := r[path]; ok || !strings.Contains(path, ".") {
		return v
	}
	var cur any = r
	for _, k := range strings.Split(path, ".") {
		o, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = o[k]
	}
	return cur
}

// scalar is a string, number or bool as text.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int32:
		return strconv.FormatInt(int64(x), 10), nil
	case int:
		return strconv.Itoa(x), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case bool:
		return strconv.FormatBool(x), nil
	case []byte:
		return string(x), nil
	}
	return "", fmt.Errorf("a %s: want text or a number", typeName(v))
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string, []byte:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	case bool:
		return "bool"
	}
	return "number"
}

func isString(v any) bool { s, ok := v.(string); return ok && s != "" }
func isList(v any) bool   { l, ok := v.([]any); return ok && len(l) > 0 }
func str(v any) string    { s, _ := v.(string); return s }

func hasAny(r map[string]any, keys ...string) bool {
	for _, k := range keys {
		if r[k] != nil {
			return true
		}
	}
	return false
}

func onlyKeys(r map[string]any, keys ...string) bool {
	for k := range r {
		found := false
		for _, want := range keys {
			if k == want {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func firstOf(r map[string]any, keys []string) string {
	for _, k := range keys {
		if r[k] != nil {
			return k
		}
	}
	return ""
}

func fieldList(r map[string]any) string {
	keys := make([]string, 0, len(r))
	for k, v := range r {
		desc := k
		switch v.(type) {
		case []any:
			desc += " (list)"
		case map[string]any:
			desc += " (object)"
		}
		keys = append(keys, desc)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

func orJoin(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + " or " + b
}

// readRows reads every record of a JSONL or Parquet file as a generic
// object. badText has, for each row, why its text is unusable ("" when it
// is fine): a JSONL line that is not valid UTF-8.
func readRows(path string, skipBad bool) (rows []map[string]any, lines []int, kind string, skipped []*LineError, badText []string, err error) {
	rows, lines, kind, skipped, badText, err = readRowsOf(path, skipBad)
	if badText == nil {
		badText = make([]string, len(rows))
	}
	return
}

func readRowsOf(path string, skipBad bool) (rows []map[string]any, lines []int, kind string, skipped []*LineError, badText []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, "", nil, nil, err
	}
	defer f.Close()
	head := make([]byte, 4)
	// A file shorter than the magic is not Parquet (ReadFull's error).
	if _, err := io.ReadFull(f, head); err == nil && bytes.Equal(head, []byte("PAR1")) {
		c, err := parquetCodec(path)
		if err != nil {
			return nil, nil, "", nil, nil, err
		}
		rows, err := c.ReadRows(path)
		if err != nil {
			return nil, nil, "", nil, nil, err
		}
		lines := make([]int, len(rows))
		for i := range lines {
			lines[i] = i + 1
		}
		return rows, lines, "parquet", nil, nil, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, "", nil, nil, err
	}
	r := NewReader(f, path)
	for {
		var raw json.RawMessage
		err := r.Next(&raw)
		if err == io.EOF {
			return rows, lines, "jsonl", skipped, badText, nil
		}
		var row map[string]any
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if derr := dec.Decode(&row); derr != nil || row == nil {
				err = &LineError{File: path, Line: r.Line(), Err: errors.New("not a JSON object")}
			}
		}
		var le *LineError
		if err != nil && errors.As(err, &le) && skipBad {
			skipped = append(skipped, le)
			continue
		}
		if err != nil {
			return nil, nil, "", nil, nil, err
		}
		rows = append(rows, row)
		lines = append(lines, r.Line())
		if bad := InvalidUTF8(raw); bad != "" {
			badText = append(badText, "the line is "+bad)
		} else {
			badText = append(badText, "")
		}
	}
}
