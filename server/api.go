package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/jsonnull"
)

// The request and response bodies of the OpenAI API that the server speaks
// and the client reads (https://platform.openai.com/docs/api-reference).
// Fields the server does not use are not declared: encoding/json ignores
// them, as OpenAI-compatible servers do.

// sampling holds the request fields that completions and chat completions
// share.
type sampling struct {
	Model       string          `json:"model"`
	N           *int            `json:"n"`
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
	TopK        *int            `json:"top_k"` // vLLM's and llama.cpp's extension
	MinP        *float64        `json:"min_p"` // idem
	MaxTokens   *int            `json:"max_tokens"`
	Stop        json.RawMessage `json:"stop"` // a string or a list
	Seed        *uint64         `json:"seed"`
	Stream      bool            `json:"stream"`
	// The sampler has no penalties: a value other than 0 is refused, never
	// silently ignored.
	FrequencyPenalty *float64 `json:"frequency_penalty"`
	PresencePenalty  *float64 `json:"presence_penalty"`
	// PromptID keys the random streams (seed, prompt id, sample) as a
	// confclip rollout does; the client sends it so that the server's
	// samples are those of a local rollout.
	PromptID *string `json:"prompt_id"`
	// ReturnTokensAsTokenIDs (vLLM's name) gives log-prob tokens as
	// "token_id:N".
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
	StreamOptions          *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type completionRequest struct {
	sampling
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
}

type chatRequest struct {
	sampling
	Messages            []chatMessage `json:"messages"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string or a list of {type, text} parts
}

// apiError is an error response: its status and OpenAI's error object.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(marshalLine(map[string]any{"error": e})) // the client left: nobody to tell
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(marshalLine(v)) // the client left: nobody to tell
}

// marshalLine is v as one line of JSON. A log-prob of -Inf (a token the
// model gives probability 0) is written as null (jsonnull); anything else
// that does not encode becomes an error object saying so, never an empty
// body.
func marshalLine(v any) []byte {
	b, err := jsonnull.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"message":` + strconv.Quote("encoding the response: "+err.Error()) + `,"type":"server_error"}}`)
	}
	return append(b, '\n')
}

// stops reads the stop field: a string, a list of strings, or null.
func (s sampling) stops() ([]string, *apiError) {
	if len(s.Stop) == 0 || string(s.Stop) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(s.Stop, &one) == nil {
		if one == "" {
			return nil, badRequest("stop", "stop: an empty string")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(s.Stop, &list); err != nil {
		return nil, badRequest("stop", "stop: want a string or a list of strings")
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "stop: %d strings, at most %d", len(list), maxStops)
	}
	for _, x := range list {
		if x == "" {
			return nil, badRequest("stop", "stop: an empty string")
		}
	}
	return list, nil
}

const (
	maxStops    = 16
	maxLogprobs = 20
	maxPrompts  = 256 // in one completions request
)

// check validates the sampling fields against the server's limits.
func (s sampling) check(o *Options) *apiError {
	if s.N != nil && (*s.N < 1 || *s.N > o.MaxN) {
		return badRequest("n", "n = %d: want 1..%d", *s.N, o.MaxN)
	}
	if t := s.Temperature; t != nil && !(*t >= 0 && *t <= 100) {
		return badRequest("temperature", "temperature = %v: want 0 (greedy) or more", *t)
	}
	if p := s.TopP; p != nil && !(*p > 0 && *p <= 1) {
		return badRequest("top_p", "top_p = %v: want a value in (0, 1]", *p)
	}
	if k := s.TopK; k != nil && *k < -1 {
		return badRequest("top_k", "top_k = %d: want -1 or 0 (off) or more", *k)
	}
	if p := s.MinP; p != nil && !(*p >= 0 && *p <= 1) {
		return badRequest("min_p", "min_p = %v: want a value in [0, 1]", *p)
	}
	for _, p := range []struct {
		name string
		v    *float64
	}{{"frequency_penalty", s.FrequencyPenalty}, {"presence_penalty", s.PresencePenalty}} {
		if p.v != nil && *p.v != 0 {
			return badRequest(p.name, "%s = %v: not supported (the sampler has no penalties); leave it out or send 0", p.name, *p.v)
		}
	}
	if m := s.MaxTokens; m != nil && *m < 1 {
		return badRequest("max_tokens", "max_tokens = %d: want 1 or more", *m)
	}
	return nil
}

// prompts reads a completions prompt: a string or a list of strings.
func (r completionRequest) prompts() ([]string, *apiError) {
	if len(r.Prompt) == 0 || string(r.Prompt) == "null" {
		return nil, badRequest("prompt", "prompt is required")
	}
	var one string
	if json.Unmarshal(r.Prompt, &one) == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(r.Prompt, &list); err != nil {
		return nil, badRequest("prompt", "prompt: want a string or a list of strings (token arrays are not supported)")
	}
	if len(list) == 0 || len(list) > maxPrompts {
		return nil, badRequest("prompt", "prompt: a list of %d prompts, want 1..%d", len(list), maxPrompts)
	}
	return list, nil
}

// messages reads chat messages, whose content may be text parts.
func (r chatRequest) messages() ([]dataset.Message, *apiError) {
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages: want at least one message")
	}
	out := make([]dataset.Message, len(r.Messages))
	for i, m := range r.Messages {
		if m.Role == "" {
			return nil, badRequest("messages", "messages[%d]: no role", i)
		}
		var text string
		if err := json.Unmarshal(m.Content, &text); err != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				return nil, badRequest("messages", "messages[%d].content: want a string or a list of text parts", i)
			}
			var b strings.Builder
			for _, p := range parts {
				if p.Type != "text" {
					return nil, badRequest("messages", "messages[%d].content: part of type %q: only text is supported", i, p.Type)
				}
				b.WriteString(p.Text)
			}
			text = b.String()
		}
		out[i] = dataset.Message{Role: m.Role, Content: text}
	}
	return out, nil
}

// decode reads a JSON body into v, telling a body over the limit (413) from
// malformed JSON (400).
func decode(r *http.Request, limit int64, v any) *apiError {
	if r.Method != http.MethodPost {
		return &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Message: r.Method + " " + r.URL.Path + ": want POST"}
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, limit))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
				Message: fmt.Sprintf("request body over %d bytes", limit)}
		}
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" { // in the API's words, not Go's type names
			field := strings.TrimPrefix(ute.Field, "sampling.")
			return badRequest(field, "%s: a JSON %s, want %s", field, ute.Value, jsonTypeName(ute.Type.Kind()))
		}
		return badRequest("", "malformed JSON body: %v", err)
	}
	return nil
}

// Response bodies.

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

type tokenLogprob struct {
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []tokenLogprob `json:"top_logprobs,omitempty"`
}

type chatLogprobs struct {
	Content []tokenLogprob `json:"content"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatOut      `json:"message,omitempty"`
	Delta        *chatOut      `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatOut struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// pieces splits a completion into its tokens' text, by the record's
// offsets (a token that ends inside a multi-byte character has the bytes
// up to the next token's start); with ids, each piece is "token_id:N".
func pieces(r *dataset.Rollout, ids bool) []string {
	out := make([]string, len(r.Tokens))
	for i := range r.Tokens {
		if ids {
			out[i] = fmt.Sprintf("token_id:%d", r.Tokens[i])
			continue
		}
		if len(r.TokenOffsets) != len(r.Tokens) {
			continue
		}
		end := len(r.Text)
		if i+1 < len(r.TokenOffsets) {
			end = r.TokenOffsets[i+1]
		}
		lo := min(r.TokenOffsets[i], len(r.Text))
		out[i] = r.Text[lo:max(lo, min(end, len(r.Text)))]
	}
	return out
}

func finishReason(r *dataset.Rollout) string {
	if r.Finish == dataset.FinishLength {
		return "length"
	}
	return "stop"
}

// finite guards the JSON encoder, which refuses NaN and infinities: a
// token of probability 0 under the model (possible after top-k at a high
// temperature is not, but a -Inf logit is) gets the most negative float.
func finite(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return 0
	case math.IsInf(x, -1):
		return -math.MaxFloat64
	case math.IsInf(x, 1):
		return math.MaxFloat64
	}
	return x
}

// jsonTypeName names the JSON type a Go kind decodes from.
func jsonTypeName(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}
