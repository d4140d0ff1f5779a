package server

import (
	"sync"
	"unicode/utf8"

	"github.com/confclip/confclip/dataset"
)

// stream follows a streamed request's completions as the engine generates
// them. The engine's goroutine calls update after each token and must not
// wait, so update only copies the new text into the sample's pending delta
// and signals; the request's handler takes the deltas and writes them.
//
// Text that a stop string could still cut is held back: the last
// maxStop-1 bytes, and a character cut short at the end. What has been sent
// is then always a prefix of the finished completion.
type stream struct {
	maxStop int
	notify  chan struct{} // capacity 1: "there is something new"

	mu      sync.Mutex
	samples map[int]*sampleStream
}

type sampleStream struct {
	sent      int // bytes of the raw text taken into deltas
	confirmed int // tokens wholly inside them
	// Pending, not yet taken by the handler.
	text   []byte
	pieces [][]byte
	lps    []float64
	tops   [][]dataset.TopLogprob // with top_logprobs asked
	// Taken so far, for the final delta: the text's length once made
	// valid UTF-8, and the tokens.
	sentText   int
	sentTokens int
}

func newStream(stops []string) *stream {
	st := &stream{notify: make(chan struct{}, 1), samples: map[int]*sampleStream{}}
	for _, s := range stops {
		st.maxStop = max(st.maxStop, len(s))
	}
	return st
}

// update takes a sequence's state after a token (rollout.Engine.Serve's
// progress): the raw bytes so far, each token's offset, the log-probs and
// the alternatives (nil unless asked).
func (st *stream) update(sample int, raw []byte, offsets []int, lps []float64, tops [][]dataset.TopLogprob) {
	st.mu.Lock()
	ss := st.samples[sample]
	if ss == nil {
		ss = &sampleStream{}
		st.samples[sample] = ss
	}
	safe := len(raw) - max(st.maxStop-1, 0)
	if safe > ss.sent {
		safe = ss.sent + completeUTF8(raw[ss.sent:safe])
		ss.text = append(ss.text, raw[ss.sent:safe]...)
		ss.sent = safe
	}
	for ss.confirmed < len(offsets) {
		end := len(raw)
		if ss.confirmed+1 < len(offsets) {
			end = offsets[ss.confirmed+1]
		}
		if end > ss.sent {
			break
		}
		ss.pieces = append(ss.pieces, append([]byte(nil), raw[offsets[ss.confirmed]:end]...))
		ss.lps = append(ss.lps, lps[ss.confirmed])
		if ss.confirmed < len(tops) {
			ss.tops = append(ss.tops, tops[ss.confirmed]) // the engine makes a new list per token
		}
		ss.confirmed++
	}
	st.mu.Unlock()
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// delta is one sample's new text and tokens.
type delta struct {
	sample int
	text   string
	pieces [][]byte
	lps    []float64
	tops   [][]dataset.TopLogprob
}

// take returns the pending deltas, in sample order, and clears them.
func (st *stream) take(n int) []delta {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []delta
	for i := range n {
		ss := st.samples[i]
		if ss == nil || len(ss.text) == 0 && len(ss.pieces) == 0 {
			continue
		}
		// JSON makes each byte that is not valid UTF-8 a U+FFFD, as the
		// finished record's text does.
		text := validText(ss.text)
		out = append(out, delta{sample: i, text: text, pieces: ss.pieces, lps: ss.lps, tops: ss.tops})
		ss.sentText += len(text)
		ss.sentTokens += len(ss.pieces)
		ss.text, ss.pieces, ss.lps, ss.tops = nil, nil, nil, nil
	}
	return out
}

// sentSoFar is how much of a sample's text (valid UTF-8 bytes) and tokens
// the deltas held.
func (st *stream) sentSoFar(sample int) (text, tokens int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if ss := st.samples[sample]; ss != nil {
		return ss.sentText, ss.sentTokens
	}
	return 0, 0
}

// validText is b with every byte that is not part of valid UTF-8 made
// U+FFFD (as rollout's finished text and encoding/json do).
func validText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			out = append(out, "\uFFFD"...)
			i++
			continue
		}
		out = append(out, b[i:i+n]...)
		i += n
	}
	return string(out)
}
