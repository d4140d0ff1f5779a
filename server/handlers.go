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
	case req.Stream && len(texts) > 1:
		writeError(w, badRequest("stream", "stream: give one prompt (a list of %d is not streamed)", len(texts)))
		return
	case req.Stream && req.ReturnTokensAsTokenIDs:
		writeError(w, badRequest("return_tokens_as_token_ids", "return_tokens_as_token_ids is not supported with stream"))
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
	if req.Logprobs != nil {
		opts.TopLogprobs = *req.Logprobs
	}
	if req.Stream {
		f, ok := w.(http.Flusher)
		if !ok {
			writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "streaming is not possible on this connection"})
			return
		}
		s.stream(w, r, req.sampling, opts, dataset.Prompt{ID: id, Prompt: texts[0]}, completionStream(req.Logprobs),
			"cmpl-"+strconv.FormatInt(time.Now().UnixNano(), 36), time.Now().Unix(), f)
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

// legacyLogprobs is the completions log-prob object; top_logprobs (top > 0)
// map each position's most likely tokens to their log-probs.
func legacyLogprobs(r *dataset.Rollout, ids bool, top int) *completionLogprobs {
	ps := pieces(r, ids)
	lp := &completionLogprobs{Tokens: ps, TokenLogprobs: make([]float64, len(ps)), TextOffset: make([]int, len(ps))}
	for i := range ps {
		lp.TokenLogprobs[i] = finite(r.Logprobs[i])
		if i < len(r.TokenOffsets) {
			lp.TextOffset[i] = r.TokenOffsets[i]
		}
		if top > 0 {
			lp.TopLogprobs = append(lp.TopLogprobs, legacyTop(altsAt(r, i), ids))
		}
	}
	return lp
}

// altsAt is the alternatives recorded at token i of a record.
func altsAt(r *dataset.Rollout, i int) []dataset.TopLogprob {
	if i < len(r.TopLogprobs) {
		return r.TopLogprobs[i]
	}
	return nil
}

// legacyTop is one position's completions top_logprobs: token text (or
// "token_id:N") to log-prob. Two tokens of the same text share a key, as
// in OpenAI's shape.
func legacyTop(alts []dataset.TopLogprob, ids bool) map[string]float64 {
	m := make(map[string]float64, len(alts))
	for _, a := range alts {
		key := a.Piece
		if ids {
			key = fmt.Sprintf("token_id:%d", a.Token)
		}
		if _, seen := m[key]; !seen { // best first: keep the likelier
			m[key] = finite(a.Logprob)
		}
	}
	return m
}

// chatLogprobsOf is the chat log-prob object of tokens lo..hi of a record.
func chatLogprobsOf(r *dataset.Rollout, ids bool, top, lo, hi int) *chatLogprobs {
	ps := pieces(r, ids)
	out := &chatLogprobs{Content: []tokenLogprob{}}
	for i := lo; i < hi; i++ {
		out.Content = append(out.Content, tokenEntry(ps[i], []byte(ps[i]), r.Logprobs[i], altsAt(r, i), ids, top))
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
	opts.TopLogprobs = top
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
		s.stream(w, r, req.sampling, opts, prompt, chatStream(req.Logprobs, top), cid, created, flusher)
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

// streamShape is how one endpoint's stream chunks look: their object name
// and the choices of each event (chat deltas or completion text).
type streamShape struct {
	object string
	// open is sample i's first event (the chat role), or nil for none.
	open func(i int) any
	// delta is new text of a sample, with its tokens' pieces, log-probs and
	// alternatives (pieces nil: tokens lo..hi of rec instead).
	delta func(sample int, text string, pieces [][]byte, lps []float64, tops [][]dataset.TopLogprob, rec *dataset.Rollout, lo, hi int) any
	// finish is a sample's last event.
	finish func(sample int, reason string) any
}

// chatStream is the chat completions stream: the role, content deltas with
// their tokens' log-probs when asked, the finish reason.
func chatStream(logprobs bool, top int) streamShape {
	return streamShape{
		object: "chat.completion.chunk",
		open: func(i int) any {
			empty := ""
			return chatChoice{Index: i, Delta: &chatOut{Role: "assistant", Content: &empty}}
		},
		delta: func(sample int, text string, ps [][]byte, lps []float64, tops [][]dataset.TopLogprob, rec *dataset.Rollout, lo, hi int) any {
			c := chatChoice{Index: sample, Delta: &chatOut{Content: &text}}
			switch {
			case !logprobs:
			case rec != nil:
				c.Logprobs = chatLogprobsOf(rec, false, top, lo, hi)
			case len(ps) > 0:
				lp := &chatLogprobs{Content: []tokenLogprob{}}
				for k, p := range ps {
					lp.Content = append(lp.Content, tokenEntry(string(p), p, lps[k], topAt(tops, k), false, top))
				}
				c.Logprobs = lp
			}
			return c
		},
		finish: func(sample int, reason string) any {
			return chatChoice{Index: sample, Delta: &chatOut{}, FinishReason: &reason}
		},
	}
}

// completionStream is the (legacy) completions stream, as OpenAI sends it:
// text chunks with their legacy log-probs when asked, then one chunk with
// the finish reason.
func completionStream(logprobs *int) streamShape {
	return streamShape{
		object: "text_completion",
		delta: func(sample int, text string, ps [][]byte, lps []float64, tops [][]dataset.TopLogprob, rec *dataset.Rollout, lo, hi int) any {
			c := map[string]any{"index": sample, "text": text, "logprobs": nil, "finish_reason": nil}
			if logprobs == nil {
				return c
			}
			lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TextOffset: []int{}}
			if rec != nil {
				full := legacyLogprobs(rec, false, *logprobs)
				lp.Tokens, lp.TokenLogprobs, lp.TextOffset = full.Tokens[lo:hi], full.TokenLogprobs[lo:hi], full.TextOffset[lo:hi]
				if full.TopLogprobs != nil {
					lp.TopLogprobs = full.TopLogprobs[lo:hi]
				}
			} else {
				for k, p := range ps {
					lp.Tokens, lp.TokenLogprobs = append(lp.Tokens, string(p)), append(lp.TokenLogprobs, finite(lps[k]))
					if *logprobs > 0 {
						lp.TopLogprobs = append(lp.TopLogprobs, legacyTop(topAt(tops, k), false))
					}
				}
			}
			c["logprobs"] = lp
			return c
		},
		finish: func(sample int, reason string) any {
			return map[string]any{"index": sample, "text": "", "logprobs": nil, "finish_reason": reason}
		},
	}
}

// stream answers with server-sent events as the completions are
// generated: each sample's opening event, then its text in deltas of whole
// characters (with their tokens' log-probs when asked), held back only
// where a stop string could still cut it, then each finish reason, the
// usage when asked, and [DONE]. The status and headers wait for the first
// token, so that a prompt the engine refuses still gets its 400.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req sampling, opts rollout.Options, prompt dataset.Prompt,
	shape streamShape, cid string, created int64, flusher http.Flusher) {
	st := newStream(opts.Stop)
	jobs, e := s.enqueue(r.Context(), opts, []dataset.Prompt{prompt}, st)
	if e != nil {
		writeError(w, e)
		return
	}
	n := opts.Group
	started, broken := false, false
	var send func(choices []any, u *usage)
	send = func(choices []any, u *usage) {
		if broken {
			return
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			if shape.open != nil {
				for i := range n {
					send([]any{shape.open(i)}, nil)
				}
			}
		}
		chunk := map[string]any{"id": cid, "object": shape.object, "created": created, "model": s.o.ModelID, "choices": choices}
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
			send([]any{shape.delta(d.sample, d.text, d.pieces, d.lps, d.tops, nil, 0, 0)}, nil)
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
			send([]any{shape.delta(rec.Sample, rest, nil, nil, nil, rec, min(sentTokens, len(rec.Tokens)), len(rec.Tokens))}, nil)
		}
		send([]any{shape.finish(rec.Sample, finishReason(rec))}, nil)
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := usageOf(res.recs)
		send([]any{}, &u)
	}
	if !broken {
		fmt.Fprint(w, "data: [DONE]\n\n")
		flusher.Flush()
	}
}

// tokenEntry is one token's chat log-prob entry, with its row's most
// likely tokens in top_logprobs when top > 0 (with ids, each token is
// "token_id:N").
func tokenEntry(token string, piece []byte, lp float64, alts []dataset.TopLogprob, ids bool, top int) tokenLogprob {
	t := tokenLogprob{Token: token, Logprob: finite(lp), Bytes: byteList([]byte(piece))}
	if top > 0 {
		t.TopLogprobs = make([]tokenLogprob, 0, len(alts))
		for _, a := range alts {
			tok := validText([]byte(a.Piece))
			if ids {
				tok = fmt.Sprintf("token_id:%d", a.Token)
			}
			t.TopLogprobs = append(t.TopLogprobs, tokenLogprob{Token: tok, Logprob: finite(a.Logprob), Bytes: byteList([]byte(a.Piece))})
		}
	}
	return t
}

func byteList(b []byte) []int {
	out := make([]int, len(b))
	for k := range b {
		out[k] = int(b[k])
	}
	return out
}

// topAt is element k of a delta's alternatives, or nil.
func topAt(tops [][]dataset.TopLogprob, k int) []dataset.TopLogprob {
	if k < len(tops) {
		return tops[k]
	}
	return nil
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
