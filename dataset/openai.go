package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Completions made by an OpenAI-compatible server (vLLM, llama.cpp's
// server, SGLang, ollama, confclip serve) come as the server's responses.
// One JSONL line holds one response, in any of these forms:
//
//   - the raw response: {"id", "object", "choices": [...]}, completions
//     (choices[i].text) or chat completions (choices[i].message.content);
//   - OpenAI's batch output: {"custom_id", "response": {"body": <response>}};
//   - a response wrapped with the prompt it answers:
//     {"prompt_id", "prompt" or "messages", "answer", "verifier", "response": <response>}.
//
// The n choices of one response are one group. Log-probs are read from the
// chat shape logprobs.content[{token, logprob, bytes, top_logprobs}] or the
// legacy logprobs.{tokens, token_logprobs}; both are optional.

// OpenAIRecord is one line of a file of OpenAI responses.
type OpenAIRecord struct {
	// PromptID is custom_id or prompt_id; "" for a bare response.
	PromptID string
	Prompt   string
	Messages []Message
	Answer   string
	Verifier string
	Response OpenAIResponse
}

// OpenAIResponse is the part of a completions or chat-completions response
// that scoring reads.
type OpenAIResponse struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Model   string         `json:"model"`
	Choices []OpenAIChoice `json:"choices"`
}

// OpenAIChoice is one completion of a response.
type OpenAIChoice struct {
	Index        int             `json:"index"`
	Text         *string         `json:"text"`
	Message      *openAIMessage  `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs"`
}

type openAIMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // text, or a list of {type, text} parts
}

// IsOpenAILine reports whether a JSONL line looks like an OpenAI response
// (raw, batch output or wrapped) rather than a confclip record.
func IsOpenAILine(line []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) != nil {
		return false
	}
	if _, ok := probe["choices"]; ok {
		return true
	}
	_, resp := probe["response"]
	return resp
}

// ParseOpenAILine decodes one line of a file of OpenAI responses.
func ParseOpenAILine(line []byte) (OpenAIRecord, error) {
	var rec OpenAIRecord
	var outer struct {
		CustomID string          `json:"custom_id"`
		PromptID json.RawMessage `json:"prompt_id"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages []Message       `json:"messages"`
		Answer   json.RawMessage `json:"answer"`
		Verifier string          `json:"verifier"`
		Response json.RawMessage `json:"response"`
		Error    json.RawMessage `json:"error"`
		Choices  json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal(line, &outer); err != nil {
		return rec, fmt.Errorf("malformed JSON: %w", err)
	}
	var err error
	if rec.PromptID, err = rawScalar(outer.PromptID); err != nil {
		return rec, fmt.Errorf("prompt_id: %w", err)
	}
	if outer.CustomID != "" {
		rec.PromptID = outer.CustomID
	}
	if rec.Answer, err = rawScalar(outer.Answer); err != nil {
		return rec, fmt.Errorf("answer: %w", err)
	}
	rec.Verifier, rec.Messages = outer.Verifier, outer.Messages
	if len(outer.Prompt) > 0 && outer.Choices == nil {
		// A wrapper's prompt: text or messages.
		var v any
		if err := json.Unmarshal(outer.Prompt, &v); err == nil {
			switch x := v.(type) {
			case string:
				rec.Prompt = x
			case []any:
				if rec.Messages, err = messages(x); err != nil {
					return rec, fmt.Errorf("prompt: %w", err)
				}
			}
		}
	}
	body := line
	if outer.Choices == nil {
		if len(outer.Response) == 0 || string(outer.Response) == "null" {
			if len(outer.Error) > 0 && string(outer.Error) != "null" {
				return rec, fmt.Errorf("the request failed: %s", outer.Error)
			}
			return rec, errors.New("no choices and no response: not an OpenAI response")
		}
		body = outer.Response
		// Batch output nests the response in {"status_code", "body"}.
		var batch struct {
			StatusCode int             `json:"status_code"`
			Body       json.RawMessage `json:"body"`
		}
		if json.Unmarshal(body, &batch) == nil && len(batch.Body) > 0 {
			if batch.StatusCode != 0 && batch.StatusCode != 200 {
				return rec, fmt.Errorf("the request failed with status %d: %s", batch.StatusCode, batch.Body)
			}
			body = batch.Body
		}
	}
	if err := json.Unmarshal(body, &rec.Response); err != nil {
		return rec, fmt.Errorf("response: %w", err)
	}
	if len(rec.Response.Choices) == 0 {
		return rec, errors.New("the response has no choices")
	}
	return rec, nil
}

// Rollouts turns the response's choices into rollout records, in the
// order of their index. The prompt, answer and verifier are the record's
// (the caller fills those a bare response lacks first). Sample is the
// choice's index.
func (r OpenAIRecord) Rollouts() ([]Rollout, error) {
	out := make([]Rollout, 0, len(r.Response.Choices))
	prompt := r.Prompt
	if prompt == "" && len(r.Messages) > 0 {
		prompt = r.Messages[len(r.Messages)-1].Content
	}
	seen := map[int]bool{}
	for i, c := range r.Response.Choices {
		if seen[c.Index] {
			return nil, fmt.Errorf("choice %d: index %d appears twice", i, c.Index)
		}
		seen[c.Index] = true
		ro := Rollout{Schema: SchemaRollout, PromptID: r.PromptID, Prompt: prompt, Answer: r.Answer, Verifier: r.Verifier, Sample: c.Index}
		switch {
		case c.Text != nil:
			ro.Text = *c.Text
		case c.Message != nil:
			text, err := messageContent(c.Message.Content)
			if err != nil && c.Message.Content != nil {
				return nil, fmt.Errorf("choice %d: message content: %w", c.Index, err)
			}
			ro.Text = text
		default:
			return nil, fmt.Errorf("choice %d has neither text nor message", c.Index)
		}
		switch c.FinishReason {
		case "length":
			ro.Finish = FinishLength
		case "":
		default: // stop, eos, stop_sequence, tool_calls...: the model ended it
			ro.Finish = FinishStop
		}
		if err := readLogprobs(&ro, c.Logprobs); err != nil {
			return nil, fmt.Errorf("choice %d: %w", c.Index, err)
		}
		out = append(out, ro)
	}
	return out, nil
}

// readLogprobs fills Logprobs (and Tokens, when the server gave ids as
// "token_id:N", as vLLM does with return_tokens_as_token_ids, and
// TokenOffsets, when the pieces spell the text) from either log-prob shape.
func readLogprobs(ro *Rollout, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	pieces, lps, err := logprobPieces(raw)
	if err != nil || len(lps) == 0 {
		return err
	}
	ro.Logprobs = make([]float64, len(lps))
	for i, l := range lps {
		if l == nil {
			return fmt.Errorf("logprobs: token %d has no log-prob (an echoed prompt token?)", i)
		}
		ro.Logprobs[i] = *l
	}
	if ids := tokenIDs(pieces); len(pieces) > 0 && len(ids) == len(pieces) {
		ro.Tokens = ids
		return nil
	}
	// Byte offsets of each piece, when the pieces spell the text exactly
	// (a stop string the server cut off breaks that: no offsets then).
	if len(pieces) == len(lps) {
		offs := make([]int, len(pieces))
		var joined bytes.Buffer
		for i, p := range pieces {
			offs[i] = joined.Len()
			joined.Write(p)
		}
		if joined.String() == ro.Text {
			ro.TokenOffsets = offs
		}
	}
	return nil
}

// logprobPieces reads a choice's logprobs in either API's shape: each
// token's text (its bytes, when given) and log-prob (nil when missing).
func logprobPieces(raw json.RawMessage) (pieces [][]byte, lps []*float64, err error) {
	var lp struct {
		// chat completions
		Content *[]struct {
			Token   string   `json:"token"`
			Logprob *float64 `json:"logprob"`
			Bytes   []int    `json:"bytes"`
		} `json:"content"`
		// completions (legacy)
		Tokens        []string   `json:"tokens"`
		TokenLogprobs []*float64 `json:"token_logprobs"`
	}
	if err := json.Unmarshal(raw, &lp); err != nil {
		return nil, nil, fmt.Errorf("logprobs: %w", err)
	}
	switch {
	case lp.Content != nil:
		for _, t := range *lp.Content {
			b := []byte(t.Token)
			if t.Bytes != nil {
				b = make([]byte, len(t.Bytes))
				for i, x := range t.Bytes {
					b[i] = byte(x)
				}
			}
			pieces = append(pieces, b)
			lps = append(lps, t.Logprob)
		}
	case lp.TokenLogprobs != nil:
		if len(lp.Tokens) != 0 && len(lp.Tokens) != len(lp.TokenLogprobs) {
			return nil, nil, fmt.Errorf("logprobs: %d tokens but %d token_logprobs", len(lp.Tokens), len(lp.TokenLogprobs))
		}
		for i, l := range lp.TokenLogprobs {
			if len(lp.Tokens) > 0 {
				pieces = append(pieces, []byte(lp.Tokens[i]))
			}
			lps = append(lps, l)
		}
	}
	return pieces, lps, nil
}

// tokenIDs reads the pieces as token ids ("token_id:N", as servers write
// them when asked for ids), stopping at the first that is not one.
func tokenIDs(pieces [][]byte) []int32 {
	ids := make([]int32, 0, len(pieces))
	for _, p := range pieces {
		s, ok := strings.CutPrefix(string(p), "token_id:")
		if !ok {
			break
		}
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			break
		}
		ids = append(ids, int32(n))
	}
	return ids
}

func rawScalar(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	return scalar(v)
}
