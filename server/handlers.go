package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/confclip/confclip/dataset"
)

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if e := decode(r, s.o.MaxBodyBytes, &req); e != nil {
		writeError(w, e)
		return
	}
	texts, e := req.prompts()
	if e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.Echo:
		writeError(w, badRequest("echo", "echo is not supported"))
		return
	case req.Stream:
		writeError(w, badRequest("stream", "stream is supported for chat completions only"))
		return
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > maxLogprobs):
		writeError(w, badRequest("logprobs", "logprobs = %d: want 0..%d", *req.Logprobs, maxLogprobs))
		return
	}
	opts, id, e := s.engineOptions(req.sampling, nil, false)
	if e != nil {
		writeError(w, e)
		return
	}
	prompts := make([]dataset.Prompt, len(texts))
	for i, t := range texts {
		prompts[i] = dataset.Prompt{ID: id, Prompt: t}
		if len(texts) > 1 && req.PromptID == nil && req.Seed == nil {
			prompts[i].ID = id + "-" + strconv.Itoa(i)
		}
	}
	groups, e := s.submit(r.Context(), opts, prompts)
	if e != nil {
		writeError(w, e)
		return
	}
	resp := map[string]any{"id": "cmpl-" + strconv.FormatInt(time.Now().UnixNano(), 36), "object": "text_completion",
		"created": time.Now().Unix(), "model": s.o.ModelID}
	var choices []completionChoice
	var u usage
	for pi, g := range groups {
		if len(g) > 0 {
			u.PromptTokens += len(g[0].PromptTokens)
		}
		for _, rec := range g {
			c := completionChoice{Index: pi*opts.Group + rec.Sample, Text: rec.Text, FinishReason: finishReason(&rec)}
			u.CompletionTokens += len(rec.Tokens)
			if req.Logprobs != nil {
				c.Logprobs = legacyLogprobs(&rec, req.ReturnTokensAsTokenIDs, *req.Logprobs)
			}
			choices = append(choices, c)
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	resp["choices"], resp["usage"] = choices, u
	writeJSON(w, resp)
}

// legacyLogprobs is the completions log-prob object. The engine keeps the
// sampled token's log-prob only, so top_logprobs hold that token.
func legacyLogprobs(r *dataset.Rollout, ids bool, top int) *completionLogprobs {
	ps := pieces(r, ids)
	lp := &completionLogprobs{Tokens: ps, TokenLogprobs: make([]float64, len(ps)), TextOffset: make([]int, len(ps))}
	for i := range ps {
		lp.TokenLogprobs[i] = finite(r.Logprobs[i])
		if i < len(r.TokenOffsets) {
			lp.TextOffset[i] = r.TokenOffsets[i]
		}
		if top > 0 {
			lp.TopLogprobs = append(lp.TopLogprobs, map[string]float64{ps[i]: lp.TokenLogprobs[i]})
		}
	}
	return lp
}

// chatLogprobsOf is the chat log-prob object of tokens lo..hi of a record.
func chatLogprobsOf(r *dataset.Rollout, ids bool, top, lo, hi int) *chatLogprobs {
	ps := pieces(r, ids)
	out := &chatLogprobs{Content: []tokenLogprob{}}
	for i := lo; i < hi; i++ {
		b := make([]int, len(ps[i]))
		for k := range len(ps[i]) {
			b[k] = int(ps[i][k])
		}
		t := tokenLogprob{Token: ps[i], Logprob: finite(r.Logprobs[i]), Bytes: b}
		if top > 0 {
			t.TopLogprobs = []tokenLogprob{{Token: ps[i], Logprob: t.Logprob, Bytes: b}}
		}
		out.Content = append(out.Content, t)
	}
	return out
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if e := decode(r, s.o.MaxBodyBytes, &req); e != nil {
		writeError(w, e)
		return
	}
	msgs, e := req.messages()
	if e != nil {
		writeError(w, e)
		return
	}
	top := 0
	if req.TopLogprobs != nil {
		top = *req.TopLogprobs
		if top < 0 || top > maxLogprobs || !req.Logprobs {
			writeError(w, badRequest("top_logprobs", "top_logprobs = %d: want 0..%d, with logprobs true", top, maxLogprobs))
			return
		}
	}
	maxTokens := req.MaxCompletionTokens
	opts, id, e := s.engineOptions(req.sampling, maxTokens, true)
	if e != nil {
		writeError(w, e)
		return
	}
	var flusher http.Flusher
	if req.Stream {
		f, ok := w.(http.Flusher)
		if !ok {
			writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "streaming is not possible on this connection"})
			return
		}
		flusher = f
	}
	groups, e := s.submit(r.Context(), opts, []dataset.Prompt{{ID: id, Messages: msgs}})
	if e != nil {
		writeError(w, e)
		return
	}
	g := groups[0]
	cid := "chatcmpl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	created := time.Now().Unix()
	var u usage
	if len(g) > 0 {
		u.PromptTokens = len(g[0].PromptTokens)
	}
	for _, rec := range g {
		u.CompletionTokens += len(rec.Tokens)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if !req.Stream {
		choices := make([]chatChoice, len(g))
		for i := range g {
			rec := &g[i]
			text, fin := rec.Text, finishReason(rec)
			choices[i] = chatChoice{Index: rec.Sample, Message: &chatOut{Role: "assistant", Content: &text}, FinishReason: &fin}
			if req.Logprobs {
				choices[i].Logprobs = chatLogprobsOf(rec, req.ReturnTokensAsTokenIDs, top, 0, len(rec.Tokens))
			}
		}
		writeJSON(w, map[string]any{"id": cid, "object": "chat.completion", "created": created, "model": s.o.ModelID, "choices": choices, "usage": u})
		return
	}
	// Server-sent events: the role, then one chunk per token of each
	// choice, then each choice's finish reason, then [DONE]. The chunks are
	// sent when the completion is done: the engine hands over whole groups.
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(choices []chatChoice, u *usage) bool {
		chunk := map[string]any{"id": cid, "object": "chat.completion.chunk", "created": created, "model": s.o.ModelID, "choices": choices}
		if u != nil {
			chunk["usage"] = u
		}
		b, _ := json.Marshal(chunk)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	for i := range g {
		rec := &g[i]
		empty := ""
		if !send([]chatChoice{{Index: rec.Sample, Delta: &chatOut{Role: "assistant", Content: &empty}}}, nil) {
			return
		}
		ps := pieces(rec, false)
		// A token may end inside a character: its bytes wait for the
		// next token's, so that every delta is whole characters.
		var pending []byte
		for t := range rec.Tokens {
			pending = append(pending, ps[t]...)
			n := completeUTF8(pending)
			if t == len(rec.Tokens)-1 {
				n = len(pending)
			}
			piece := string(pending[:n])
			pending = append(pending[:0], pending[n:]...)
			c := chatChoice{Index: rec.Sample, Delta: &chatOut{Content: &piece}}
			if req.Logprobs {
				c.Logprobs = chatLogprobsOf(rec, req.ReturnTokensAsTokenIDs, top, t, t+1)
			}
			if !send([]chatChoice{c}, nil) {
				return
			}
		}
		fin := finishReason(rec)
		if !send([]chatChoice{{Index: rec.Sample, Delta: &chatOut{}, FinishReason: &fin}}, nil) {
			return
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		if !send([]chatChoice{}, &u) {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	flusher.Flush()
}

// completeUTF8 is the length of b's prefix that ends on a character
// boundary: b less a multi-byte character cut short at its end.
func completeUTF8(b []byte) int {
	i := 0
	for i < len(b) {
		if !utf8.FullRune(b[i:]) {
			return i
		}
		_, n := utf8.DecodeRune(b[i:])
		i += n
	}
	return i
}
