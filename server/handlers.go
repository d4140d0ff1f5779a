package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/rollout"
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
	opts, id, e := s.engineOptions(req.sampling, nil)
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
		out.Content = append(out.Content, tokenEntry(ps[i], []byte(ps[i]), r.Logprobs[i], top))
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
	opts, id, e := s.engineOptions(req.sampling, maxTokens)
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
	prompt := dataset.Prompt{ID: id, Messages: msgs}
	cid := "chatcmpl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	created := time.Now().Unix()
	if req.Stream {
		if req.ReturnTokensAsTokenIDs {
			writeError(w, badRequest("return_tokens_as_token_ids", "return_tokens_as_token_ids is not supported with stream"))
			return
		}
		s.streamChat(w, r, req, opts, prompt, top, cid, created, flusher)
		return
	}
	groups, e := s.submit(r.Context(), opts, []dataset.Prompt{prompt})
	if e != nil {
		writeError(w, e)
		return
	}
	g := groups[0]
	choices := make([]chatChoice, len(g))
	for i := range g {
		rec := &g[i]
		text, fin := rec.Text, finishReason(rec)
		choices[i] = chatChoice{Index: rec.Sample, Message: &chatOut{Role: "assistant", Content: &text}, FinishReason: &fin}
		if req.Logprobs {
			choices[i].Logprobs = chatLogprobsOf(rec, req.ReturnTokensAsTokenIDs, top, 0, len(rec.Tokens))
		}
	}
	writeJSON(w, map[string]any{"id": cid, "object": "chat.completion", "created": created, "model": s.o.ModelID, "choices": choices, "usage": usageOf(g)})
}

func usageOf(g []dataset.Rollout) usage {
	var u usage
	if len(g) > 0 {
		u.PromptTokens = len(g[0].PromptTokens)
	}
	for _, rec := range g {
		u.CompletionTokens += len(rec.Tokens)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// streamChat answers with server-sent events as the completions are
// generated: each sample's role, then its text in deltas of whole
// characters (with their tokens' log-probs when asked), held back only
// where a stop string could still cut it, then each finish reason, the
// usage when asked, and [DONE]. The status and headers wait for the first
// token, so that a prompt the engine refuses still gets its 400.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, req chatRequest, opts rollout.Options, prompt dataset.Prompt,
	top int, cid string, created int64, flusher http.Flusher) {
	st := newStream(opts.Stop)
	jobs, e := s.enqueue(r.Context(), opts, []dataset.Prompt{prompt}, st)
	if e != nil {
		writeError(w, e)
		return
	}
	n := opts.Group
	started, broken := false, false
	var send func(choices []chatChoice, u *usage)
	send = func(choices []chatChoice, u *usage) {
		if broken {
			return
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			empty := ""
			for i := range n {
				send([]chatChoice{{Index: i, Delta: &chatOut{Role: "assistant", Content: &empty}}}, nil)
			}
		}
		chunk := map[string]any{"id": cid, "object": "chat.completion.chunk", "created": created, "model": s.o.ModelID, "choices": choices}
		if u != nil {
			chunk["usage"] = u
		}
		if _, err := fmt.Fprintf(w, "data: %s\n", marshalLine(chunk)); err != nil {
			broken = true // the client left; the job still ends in the engine
			return
		}
		flusher.Flush()
	}
	sendDeltas := func() {
		for _, d := range st.take(n) {
			text := d.text
			c := chatChoice{Index: d.sample, Delta: &chatOut{Content: &text}}
			if req.Logprobs && len(d.pieces) > 0 {
				lp := &chatLogprobs{Content: []tokenLogprob{}}
				for k, p := range d.pieces {
					lp.Content = append(lp.Content, tokenEntry(string(p), []byte(p), d.lps[k], top))
				}
				c.Logprobs = lp
			}
			send([]chatChoice{c}, nil)
		}
	}
	var res jobResult
wait:
	for {
		select {
		case <-st.notify:
			sendDeltas()
		case res = <-jobs[0].done:
			break wait
		}
	}
	if res.err != nil {
		if !started {
			writeError(w, res.err)
		} else {
			_, _ = fmt.Fprintf(w, "data: %s\n", marshalLine(map[string]any{"error": res.err})) // the client left: nobody to tell
		}
		return
	}
	sendDeltas()
	for i := range res.recs {
		rec := &res.recs[i]
		sentText, sentTokens := st.sentSoFar(rec.Sample)
		rest := rec.Text[min(sentText, len(rec.Text)):]
		if rest != "" || sentTokens < len(rec.Tokens) {
			c := chatChoice{Index: rec.Sample, Delta: &chatOut{Content: &rest}}
			if req.Logprobs {
				c.Logprobs = chatLogprobsOf(rec, false, top, min(sentTokens, len(rec.Tokens)), len(rec.Tokens))
			}
			send([]chatChoice{c}, nil)
		}
		fin := finishReason(rec)
		send([]chatChoice{{Index: rec.Sample, Delta: &chatOut{}, FinishReason: &fin}}, nil)
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := usageOf(res.recs)
		send([]chatChoice{}, &u)
	}
	if !broken {
		fmt.Fprint(w, "data: [DONE]\n\n")
		flusher.Flush()
	}
}

// tokenEntry is one token's chat log-prob entry; the engine keeps no
// alternatives, so top_logprobs hold the token itself.
func tokenEntry(token string, piece []byte, lp float64, top int) tokenLogprob {
	b := make([]int, len(piece))
	for k := range piece {
		b[k] = int(piece[k])
	}
	t := tokenLogprob{Token: token, Logprob: finite(lp), Bytes: b}
	if top > 0 {
		t.TopLogprobs = []tokenLogprob{{Token: token, Logprob: t.Logprob, Bytes: b}}
	}
	return t
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
