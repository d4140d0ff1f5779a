package rollout

import (
	"bytes"
	"unicode/utf8"

	"github.com/confclip/confclip/llama"
)

// pieces caches the bytes each token stands for, so that building a
// completion's text costs no cgo call per token after the first sight of it.
type pieces struct {
	m   *llama.Model
	buf [][]byte
	ok  []bool
	eog []bool
}

func newPieces(m *llama.Model) *pieces {
	n := m.NVocab()
	return &pieces{m: m, buf: make([][]byte, n), ok: make([]bool, n), eog: make([]bool, n)}
}

// of returns token t's piece; end-of-generation tokens have none, since they
// end the text rather than belong to it.
func (p *pieces) of(t llama.Token) ([]byte, error) {
	if t >= 0 && int(t) < len(p.ok) && p.ok[t] {
		return p.buf[t], nil
	}
	var b []byte
	eog := p.m.IsEOG(t)
	if !eog {
		var err error
		if b, err = p.m.TokenPiece(t, false); err != nil {
			return nil, err
		}
	}
	p.buf[t], p.ok[t], p.eog[t] = b, true, eog
	return b, nil
}

// isEOG reports whether t ends generation; t must have been through of.
func (p *pieces) isEOG(t llama.Token) bool { return p.eog[t] }

// textBuilder collects a completion's bytes token by token and watches for
// stop strings. Pieces are bytes, not characters (byte-fallback tokens split
// a character), so the text is only made valid UTF-8 when it is finished.
type textBuilder struct {
	raw     []byte
	offsets []int // offsets[i]: where token i's piece starts in raw
	stops   [][]byte
	maxStop int
}

func newTextBuilder(stops [][]byte) *textBuilder {
	tb := &textBuilder{stops: stops}
	for _, s := range stops {
		tb.maxStop = max(tb.maxStop, len(s))
	}
	return tb
}

// add appends one token's piece. It returns the byte offset where a stop
// string begins when one now appears in the text (it may have started in
// earlier tokens), or -1. Only the new piece and the len(stop)-1 bytes before
// it are searched, since earlier text was searched when it was added.
func (tb *textBuilder) add(piece []byte) int {
	old := len(tb.raw)
	tb.offsets = append(tb.offsets, old)
	tb.raw = append(tb.raw, piece...)
	if len(piece) == 0 || tb.maxStop == 0 {
		return -1
	}
	first := -1
	for _, s := range tb.stops {
		from := max(0, old-len(s)+1)
		if i := bytes.Index(tb.raw[from:], s); i >= 0 && (first < 0 || from+i < first) {
			first = from + i
		}
	}
	return first
}

// cutAt ends the completion where a stop string begins, at byte j: the text
// keeps raw[:j], and the tokens are kept up to and including the one whose
// piece holds byte j (the token that started the stop string, which the
// model must learn to emit, as it must an end-of-generation token). It
// returns how many tokens to keep.
func (tb *textBuilder) cutAt(j int) int {
	keep := len(tb.offsets)
	for i, o := range tb.offsets {
		end := len(tb.raw)
		if i+1 < len(tb.offsets) {
			end = tb.offsets[i+1]
		}
		if o <= j && j < end {
			keep = i + 1
			break
		}
	}
	tb.raw = tb.raw[:j]
	tb.offsets = tb.offsets[:keep]
	return keep
}

// finish returns the text, valid UTF-8, and each token's offset in it. Bytes
// that do not form valid UTF-8 (a character cut off by the length limit, or
// byte tokens sampled in an impossible order) become U+FFFD, each byte its
// own; offsets move with them.
func (tb *textBuilder) finish() (string, []int) {
	text, offsets := validUTF8(tb.raw, tb.offsets)
	return text, offsets
}

// validUTF8 replaces every byte of raw that is not part of a valid UTF-8
// sequence with U+FFFD and maps offsets into raw onto the new text. An offset
// inside a valid character (a character split over tokens) keeps its place
// inside it.
func validUTF8(raw []byte, offsets []int) (string, []int) {
	if utf8.Valid(raw) {
		return string(raw), append([]int(nil), offsets...)
	}
	// newAt[i] is where raw byte i lands in the new text.
	newAt := make([]int, len(raw)+1)
	var out []byte
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size <= 1 {
			newAt[i] = len(out)
			out = append(out, "\uFFFD"...)
			i++
			continue
		}
		for k := 0; k < size; k++ {
			newAt[i+k] = len(out) + k
		}
		out = append(out, raw[i:i+size]...)
		i += size
	}
	newAt[len(raw)] = len(out)
	mapped := make([]int, len(offsets))
	for i, o := range offsets {
		mapped[i] = newAt[min(o, len(raw))]
	}
	return string(out), mapped
}

// piecesText is the text and offsets of whole token list, as the engine
// would have built them (end-of-generation tokens add nothing).
func piecesText(p *pieces, toks []llama.Token) (string, []int, error) {
	tb := newTextBuilder(nil)
	for _, t := range toks {
		b, err := p.of(t)
		if err != nil {
			return "", nil, err
		}
		tb.add(b)
	}
	text, off := tb.finish()
	return text, off, nil
}
