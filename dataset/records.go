// Package dataset holds the JSON Lines record types that flow between the
// stages (prompt → rollout → scored → train example) and their readers and
// writers. Every record carries a `schema` field with a version so that a
// reader can refuse a file written by an incompatible version.
package dataset

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Schema versions written into each record's `schema` field.
const (
	SchemaPrompt  = "confclip.prompt/v1"
	SchemaRollout = "confclip.rollout/v1"
	SchemaScored  = "confclip.scored/v1"
	SchemaTrain   = "confclip.train/v1"
)

// Message is one turn of a chat conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Prompt is one task: a prompt (raw text or chat messages) and its gold answer.
type Prompt struct {
	Schema   string         `json:"schema,omitempty"`
	ID       string         `json:"id"`
	Prompt   string         `json:"prompt,omitempty"`
	Messages []Message      `json:"messages,omitempty"`
	Answer   string         `json:"answer"`
	Verifier string         `json:"verifier,omitempty"`
	Meta     map[string]any `json:"meta,omitempty"`
	// BadText, when set, says why the prompt's text cannot be used as read
	// (its line was not valid UTF-8, which JSON decoding would have turned
	// into U+FFFD silently); rollout reports such a prompt as bad.
	BadText string `json:"-"`
}

// UnmarshalJSON decodes a prompt, noting in BadText a line that is not
// valid UTF-8.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	type plain Prompt // without the method
	if err := json.Unmarshal(b, (*plain)(p)); err != nil {
		return err
	}
	if bad := InvalidUTF8(b); bad != "" {
		p.BadText = "the line is " + bad
	}
	return nil
}

// InvalidUTF8 describes the first byte of b that is not part of valid
// UTF-8, or returns "" when b is valid.
func InvalidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return ""
	}
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	return fmt.Sprintf("not valid UTF-8 (byte %#02x at offset %d)", b[i], i)
}

// Timing is the wall-clock cost of one completion, in milliseconds.
type Timing struct {
	PromptMS   float64 `json:"prompt_ms"`   // prefill of the (shared) prompt
	GenerateMS float64 `json:"generate_ms"` // from first to last sampled token
}

// Finish reasons.
const (
	FinishStop   = "stop"   // an end-of-generation token or a stop string
	FinishLength = "length" // the max-tokens limit
)

// Rollout is one sampled completion of a prompt, with every token's
// log-probabilities. Logprobs, SamplingLogprobs, Entropies and SelfCertainties have one entry per
// completion token (len(Tokens)). Completions produced elsewhere may come with
// Text only (no tokens, no log-probs); scoring then needs a model for
// confidence-based rewards.
type Rollout struct {
	Schema   string `json:"schema,omitempty"`
	PromptID string `json:"prompt_id"`
	Prompt   string `json:"prompt"`
	Answer   string `json:"answer"`
	Verifier string `json:"verifier,omitempty"`
	// Messages are the prompt's messages as the user gave them (Prompt is
	// their rendering); Meta carries the prompt's other fields (verl's
	// data_source and extra_info, any unknown field) to the exports.
	Messages         []Message      `json:"messages,omitempty"`
	Meta             map[string]any `json:"meta,omitempty"`
	Sample           int            `json:"sample"`
	Seed             uint64         `json:"seed"`
	PromptTokens     []int32        `json:"prompt_tokens,omitempty"`
	Tokens           []int32        `json:"tokens,omitempty"`
	Text             string         `json:"text"`
	Logprobs         []float64      `json:"logprobs,omitempty"`
	SamplingLogprobs []float64      `json:"sampling_logprobs,omitempty"`
	Entropies        []float64      `json:"entropies,omitempty"`
	// SelfCertainties are each position's KL(U || p), the model
	// distribution against the uniform one over the vocabulary, nats
	// (Intuitor's self-certainty; reward self_certainty).
	SelfCertainties []float64 `json:"self_certainties,omitempty"`
	Finish          string    `json:"finish,omitempty"`
	Timing          *Timing   `json:"timing,omitempty"`
	// TokenOffsets[i] is the byte offset in Text where token i's piece starts;
	// it maps a verifier's answer span onto tokens (confidence scope "answer").
	TokenOffsets []int `json:"token_offsets,omitempty"`
	// TopLogprobs[i] are the most likely tokens at completion token i, best
	// first, with their model log-probs (as Logprobs); only when the engine
	// was asked for them (rollout.Options.TopLogprobs, serve's
	// top_logprobs).
	TopLogprobs [][]TopLogprob `json:"top_logprobs,omitempty"`
	// Worker is the remote worker (its endpoint) that sampled the record,
	// in `run` with [rollout] endpoints; "" for the local engine.
	Worker string `json:"worker,omitempty"`
}

// TopLogprob is one of the most likely tokens at a position.
type TopLogprob struct {
	Token   int32   `json:"token"`
	Piece   string  `json:"piece"` // its text (raw bytes; an end-of-generation token's special text)
	Logprob float64 `json:"logprob"`
}

// VerifierResult is what a verifier said about one completion.
type VerifierResult struct {
	Name       string  `json:"name"`
	Score      float64 `json:"score"`
	Correct    bool    `json:"correct"`
	Extracted  string  `json:"extracted"`
	AnswerSpan []int   `json:"answer_span,omitempty"` // [start, end) byte offsets in Text, absent when nothing was extracted
	Reason     string  `json:"reason,omitempty"`
}

// Scored is a rollout with its verdict, confidence, reward and advantage.
type Scored struct {
	Rollout
	VerifierResult VerifierResult `json:"verifier_result"`
	Confidence     float64        `json:"confidence"`
	// ConfidenceScope is the scope actually used: "completion", "answer", or
	// "completion (fallback: ...)" when the answer scope could not be applied.
	ConfidenceScope string `json:"confidence_scope"`
	// StatedConfidence is the confidence the completion states in its text
	// (reward rlcr: the last <confidence>q</confidence>, q in [0, 1]); nil
	// when it states none, or the reward reads none.
	StatedConfidence *float64 `json:"stated_confidence,omitempty"`
	// SelfCertainty is the completion's self-certainty, the mean of its
	// tokens' SelfCertainties, when the reward reads it (reward
	// self_certainty, reward.self_certainty_weight).
	SelfCertainty *float64 `json:"self_certainty,omitempty"`
	// AnswerProb is, for reward answer_prob, the mean probability of the
	// reference answer's tokens teacher-forced after the completion's
	// reasoning, and AnswerProbBase straight after the prompt; the reward is
	// max(AnswerProb - AnswerProbBase, 0).
	AnswerProb     *float64 `json:"answer_prob,omitempty"`
	AnswerProbBase *float64 `json:"answer_prob_base,omitempty"`
	Reward         float64  `json:"reward"`
	Advantage      float64  `json:"advantage"`
}

// Provenance says where a training example came from.
type Provenance struct {
	ModelSHA256 string `json:"model_sha256,omitempty" parquet:"model_sha256"`
	Adapter     string `json:"adapter,omitempty" parquet:"adapter"`
	ConfigHash  string `json:"config_hash,omitempty" parquet:"config_hash"`
}

// TrainExample is one completion ready for a policy-gradient step; the column
// names follow verl and TRL (prompt_ids, completion_ids, completion_mask,
// advantages, old_logprobs).
type TrainExample struct {
	Schema         string     `json:"schema,omitempty" parquet:"schema"`
	PromptID       string     `json:"prompt_id" parquet:"prompt_id"`
	Sample         int        `json:"sample" parquet:"sample"`
	PromptIDs      []int32    `json:"prompt_ids" parquet:"prompt_ids,list"`
	CompletionIDs  []int32    `json:"completion_ids" parquet:"completion_ids,list"`
	CompletionMask []int32    `json:"completion_mask" parquet:"completion_mask,list"`
	Advantage      float64    `json:"advantage" parquet:"advantage"`
	Advantages     []float64  `json:"advantages" parquet:"advantages,list"`
	OldLogprobs    []float64  `json:"old_logprobs" parquet:"old_logprobs,list"`
	Reward         float64    `json:"reward" parquet:"reward"`
	Provenance     Provenance `json:"provenance" parquet:"provenance"`
	// The text beside the tokens, so that a Python trainer needs no
	// tokenizer to show or filter rows: the prompt as rendered, the
	// completion's text and the reference answer.
	Prompt     string `json:"prompt" parquet:"prompt"`
	Completion string `json:"completion" parquet:"completion"`
	Answer     string `json:"answer" parquet:"answer"`
	// Messages and Meta are the prompt's, as the rollout carried them
	// (JSONL exports keep them; the layouts map them to their columns).
	Messages []Message      `json:"messages,omitempty" parquet:"-"`
	Meta     map[string]any `json:"meta,omitempty" parquet:"-"`
}
