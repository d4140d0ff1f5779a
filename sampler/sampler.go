// Package sampler turns one row of logits into a token and reports, for the
// token chosen, the log-probabilities the method needs (METHOD.md "Notation"):
//
//   - the model log-probability l: log-softmax of the raw logits at
//     temperature 1, before any truncation;
//   - the sampling log-probability s: under the distribution actually sampled
//     from, after truncation and temperature, renormalised (0 for greedy);
//   - the entropy H (nats) of the model distribution;
//   - its self-certainty KL(U || p) (nats), against the uniform distribution
//     over the vocabulary (Intuitor, arXiv 2505.19590).
//
// The truncation order follows llama.cpp's common sampler chain: top-k, then
// top-p, then min-p, each on the distribution left by the one before
// (renormalised, at temperature 1), and temperature last, on the survivors
// only. Min-p keeps the tokens whose probability is at least MinP times that
// of the most likely token. Ties are broken by token id, lower first, so a
// row always gives the same candidate set.
//
// All sums run in float64 after subtracting the row's maximum, so logits of
// ±1e4 or -Inf (banned tokens) are fine. The package is pure Go.
package sampler

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Params are the sampling settings; the zero value of each field turns that
// stage off, except Temperature, whose zero means greedy decoding.
type Params struct {
	Temperature float64 `toml:"temperature"` // > 0 scales the logits; 0 = greedy (argmax)
	TopP        float64 `toml:"top_p"`       // keep the smallest prefix with mass >= TopP; 0 or 1 = off
	TopK        int     `toml:"top_k"`       // keep the K most likely tokens; 0 = off
	MinP        float64 `toml:"min_p"`       // keep tokens with p >= MinP * p_max; 0 = off
}

// Validate reports settings that have no meaning.
func (p Params) Validate() error {
	switch {
	case !(p.Temperature >= 0) || math.IsInf(p.Temperature, 1):
		return fmt.Errorf("sampler: temperature %v: want a finite value >= 0 (0 = greedy)", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sampler: top_k %d: want >= 0 (0 = off)", p.TopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("sampler: top_p %v: want a value in [0, 1] (0 or 1 = off)", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("sampler: min_p %v: want a value in [0, 1] (0 = off)", p.MinP)
	}
	return nil
}

func (p Params) topP() bool { return p.TopP > 0 && p.TopP < 1 }

// Choice is the token sampled from one row and what the method records for it.
type Choice struct {
	Token           int32
	LogProb         float64 // model log-probability (raw logits, temperature 1)
	SamplingLogProb float64 // log-probability under the distribution sampled from
	Entropy         float64 // entropy of the model distribution, nats
	// SelfCertainty is KL(U || p) of the model distribution p against the
	// uniform U over the vocabulary, nats (Intuitor's per-token term).
	SelfCertainty float64
}

// ErrBadLogits is wrapped by the errors for rows that define no distribution:
// empty, with a NaN or +Inf entry, or with every entry -Inf.
var ErrBadLogits = errors.New("logits define no distribution")

// Sampler samples with fixed Params. It keeps its scratch buffers between
// calls, so sampling allocates nothing once it has seen the vocabulary size.
// A Sampler is not safe for concurrent use; give each goroutine its own.
type Sampler struct {
	p    Params
	w    []float64 // w[i] = exp(logit_i - max) for every token of the row
	q    []float64 // temperature-scaled weights of the candidates
	cand []int32   // candidate token ids after truncation
	edge []int32   // scratch for nucleusOfRow's cut bucket
}

// New returns a Sampler for p.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p}, nil
}

// Params returns the settings the Sampler was made with.
func (s *Sampler) Params() Params { return s.p }

// Sample chooses a token from one row of logits. It draws exactly one number
// from rng unless the temperature is 0 (greedy draws none).
func (s *Sampler) Sample(logits []float32, rng *RNG) (Choice, error) {
	c, _, err := s.sample(logits, rng)
	return c, err
}

// Alt is one of a row's most likely tokens with its model log-probability.
type Alt struct {
	Token   int32
	LogProb float64 // as Choice.LogProb: raw logits, temperature 1
}

// MaxTop is the most alternatives SampleTop gives per row (OpenAI's
// top_logprobs limit).
const MaxTop = 20

// SampleTop is Sample that also appends the row's k most likely tokens to
// top, best first (lower id first on ties), with their model
// log-probabilities computed as Choice.LogProb is, so the sampled token's
// entry, when it is among them, equals Choice.LogProb. They come from the
// same row statistics as the draw, and are selected with a heap of k over
// the row: O(n log k), no sort of the vocabulary. k is capped at MaxTop and
// at the tokens of non-zero probability; the draw is Sample's.
func (s *Sampler) SampleTop(logits []float32, rng *RNG, k int, top []Alt) (Choice, []Alt, error) {
	c, r, err := s.sample(logits, rng)
	if err != nil {
		return c, top, err
	}
	return c, s.appendTop(top, logits, r, k), nil
}

// appendTop appends the row's k most likely tokens (k capped at MaxTop and
// at the row's support) to top, best first, with their model log-probs.
func (s *Sampler) appendTop(top []Alt, logits []float32, r rowStats, k int) []Alt {
	if k <= 0 {
		return top
	}
	k = min(k, MaxTop, r.Support)
	for _, id := range selectTopK(s.edge[:k], logits, k) {
		top = append(top, Alt{Token: id, LogProb: float64(logits[id]) - r.Max - r.logSum})
	}
	return top
}

func (s *Sampler) sample(logits []float32, rng *RNG) (Choice, rowStats, error) {
	s.grow(len(logits))
	w := s.w[:len(logits)]
	r, err := scan(logits, w)
	if err != nil {
		return Choice{}, r, err
	}
	return s.sampleRow(logits, w, r, rng), r, nil
}

// grow sizes the scratch buffers for a row of n logits.
func (s *Sampler) grow(n int) {
	if cap(s.w) < n {
		s.w = make([]float64, n)
		s.q = make([]float64, n)
		s.cand = make([]int32, n)
		s.edge = make([]int32, n)
	}
}

// sampleRow draws from a scanned row: w holds exp(logit - max).
func (s *Sampler) sampleRow(logits []float32, w []float64, r rowStats, rng *RNG) Choice {
	p := s.p
	if p.Temperature == 0 {
		return r.choice(logits, r.Argmax, 0)
	}
	cand := s.truncate(logits, w, r)
	invT := 1 / p.Temperature
	tok, logQ := s.draw(logits, w, cand, r.Max, invT, rng.Float64())
	return r.choice(logits, tok, (float64(logits[tok])-r.Max)*invT-logQ)
}

// SampleScanned is SampleTop for a row already scanned: st are its Stats
// and w (len(logits)) its exp(logit - Max), as Scan computes them or as a
// caller computed them in bulk (the rollout engine summarises a step's rows
// together, llama.Context.LogitRows). The draw, the log-probabilities and
// the alternatives are SampleTop's. A greedy Sampler does not read w, which
// may then be nil.
func (s *Sampler) SampleScanned(logits []float32, w []float64, st Stats, rng *RNG, k int, top []Alt) (Choice, []Alt, error) {
	if err := st.check(logits); err != nil {
		return Choice{}, top, err
	}
	if len(w) != len(logits) && !(w == nil && s.p.Temperature == 0) {
		return Choice{}, top, fmt.Errorf("sampler: %d weights for %d logits", len(w), len(logits))
	}
	s.grow(len(logits))
	r := st.row(len(logits))
	c := s.sampleRow(logits, w, r, rng)
	return c, s.appendTop(top, logits, r, k), nil
}

// truncate applies top-k, top-p and min-p, in that order, and returns the
// surviving token ids in a deterministic order (best first after top-k), or
// nil when no stage is active and every token of the row survives. w holds
// exp(logit - max) for the row.
func (s *Sampler) truncate(logits []float32, w []float64, r rowStats) []int32 {
	p := s.p
	var cand []int32
	if p.TopK > 0 && p.TopK < r.Support {
		cand = selectTopK(s.cand[:p.TopK], logits, p.TopK)
	}
	if p.topP() {
		if cand == nil {
			cand = s.nucleusOfRow(logits, w, r, p.TopP)
		} else {
			cand = nucleusOfSorted(cand, w, p.TopP)
		}
	}
	if p.MinP > 0 {
		cand = applyMinP(cand, s.cand[:0], w, p.MinP)
	}
	return cand
}

// LogSoftmaxAt returns the model log-probability of token tok in a row of
// logits (log-softmax at temperature 1) and the entropy of that distribution,
// in nats. Teacher-forced scoring uses it, and Sample computes the same
// numbers the same way, so rollout and scoring log-probs agree bit for bit.
func LogSoftmaxAt(logits []float32, tok int32) (logprob, entropy float64, err error) {
	if tok < 0 || int(tok) >= len(logits) {
		return 0, 0, fmt.Errorf("sampler: token %d outside the vocabulary of %d", tok, len(logits))
	}
	r, err := scan(logits, nil)
	if err != nil {
		return 0, 0, err
	}
	c := r.choice(logits, tok, 0)
	return c.LogProb, c.Entropy, nil
}

// LogSoftmaxScanned is LogSoftmaxAt for a row whose Stats are known.
func LogSoftmaxScanned(logits []float32, tok int32, st Stats) (logprob, entropy float64, err error) {
	c, err := ForcedChoice(logits, tok, st)
	return c.LogProb, c.Entropy, err
}

// ForcedChoice is what Sample reports for token tok of a row whose Stats
// are known, without drawing: its model log-probability, the row's entropy
// and self-certainty (SamplingLogProb 0). Teacher forcing uses it.
func ForcedChoice(logits []float32, tok int32, st Stats) (Choice, error) {
	if tok < 0 || int(tok) >= len(logits) {
		return Choice{}, fmt.Errorf("sampler: token %d outside the vocabulary of %d", tok, len(logits))
	}
	if err := st.check(logits); err != nil {
		return Choice{}, err
	}
	return st.row(len(logits)).choice(logits, tok, 0), nil
}

// Stats summarise a row of logits x: its largest value Max and that
// token (the lowest id on ties), and with e_i = exp(x_i - Max) over the
// Support tokens where e_i > 0, Sum = Σ e_i and Dot = Σ e_i (x_i - Max);
// Mean = (1/V) Σ (x_i - Max) over all V tokens. Every log-probability, the
// entropy and the self-certainty follow from them.
type Stats struct {
	Max     float64
	Argmax  int32
	Sum     float64
	Dot     float64
	Mean    float64
	Support int
}

// Scan computes a row's Stats, storing exp(x_i - Max) into w when w is not
// nil (len(w) >= len(logits)). A row with a NaN or +Inf, or no finite
// value, is an ErrBadLogits error.
func Scan(logits []float32, w []float64) (Stats, error) {
	r, err := scan(logits, w)
	return r.Stats, err
}

// check refuses Stats that cannot belong to the row.
func (st Stats) check(logits []float32) error {
	if st.Argmax < 0 || int(st.Argmax) >= len(logits) || !(st.Sum >= 1) || st.Support < 1 {
		return fmt.Errorf("sampler: stats %+v do not describe a row of %d logits: %w", st, len(logits), ErrBadLogits)
	}
	return nil
}

// row adds what every choice needs: log S, the entropy
// H = -Σ p_i log p_i = log S - Dot / S, with p_i = e_i / S, and the
// self-certainty KL(U || p) = -log V - (1/V) Σ log p_i = log S - Mean - log V
// (log p_i = x_i - Max - log S).
func (st Stats) row(vocab int) rowStats {
	logSum := math.Log(st.Sum)
	return rowStats{Stats: st, logSum: logSum, entropy: logSum - st.Dot/st.Sum,
		selfCertainty: logSum - st.Mean - math.Log(float64(vocab))}
}

// rowStats are a row's Stats with log S and the entropy.
type rowStats struct {
	Stats
	logSum        float64 // log(Sum): log-softmax(x)_i = x_i - Max - logSum
	entropy       float64 // of the softmax, nats
	selfCertainty float64 // KL(uniform || softmax), nats
}

// scan computes the row's statistics, storing exp(logit - max) into w when w
// is not nil.
func scan(logits []float32, w []float64) (rowStats, error) {
	m, arg := float32(math.Inf(-1)), -1
	for i, x := range logits {
		if !(x <= math.MaxFloat32) { // NaN or +Inf
			return rowStats{}, fmt.Errorf("sampler: logit %v at token %d: %w", x, i, ErrBadLogits)
		}
		if x > m {
			m, arg = x, i
		}
	}
	if arg < 0 {
		return rowStats{}, fmt.Errorf("sampler: %d logits, none finite: %w", len(logits), ErrBadLogits)
	}
	mf := float64(m)
	var sum, dot, all float64
	support := 0
	for i, x := range logits {
		d := float64(x) - mf
		e := math.Exp(d)
		if w != nil {
			w[i] = e
		}
		all += d
		if e > 0 { // skips -Inf, whose d*e would be NaN
			sum += e
			dot += e * d
			support++
		}
	}
	return Stats{Max: mf, Argmax: int32(arg), Sum: sum, Dot: dot, Mean: all / float64(len(logits)), Support: support}.row(len(logits)), nil
}

func (r rowStats) choice(logits []float32, tok int32, samplingLogProb float64) Choice {
	return Choice{
		Token:           tok,
		LogProb:         float64(logits[tok]) - r.Max - r.logSum,
		SamplingLogProb: samplingLogProb,
		Entropy:         r.entropy,
		SelfCertainty:   r.selfCertainty,
	}
}

// selectTopK returns the k best tokens, best first, in dst (len k). It keeps a
// heap of the k best seen so far with the worst on top, so a scan of the row
// costs one comparison for most tokens: O(n log k), no full sort.
func selectTopK(dst []int32, logits []float32, k int) []int32 {
	for i := range dst {
		dst[i] = int32(i)
	}
	h := tokenHeap{ids: dst, logits: logits}
	h.init()
	for i := k; i < len(logits); i++ {
		if better(logits, int32(i), dst[0]) {
			dst[0] = int32(i)
			h.down(0, k)
		}
	}
	for n := k; n > 1; n-- { // heap sort: the worst go to the back
		h.popTo(n)
	}
	return dst
}

// nucleusBuckets is the number of logit buckets nucleusOfRow sorts by.
const nucleusBuckets = 256

// nucleusOfRow applies top-p to the whole row without sorting it.
//
// First, only tokens with p_i >= (1-topP)/n can be in the nucleus (were one
// below it, the tokens from the nucleus's last onwards, at most n of them each
// below (1-topP)/n, would hold less than the 1-topP of mass they must hold),
// so it drops the tokens under half that bound. Then, as llama.cpp does, it
// buckets the survivors by logit, finds the bucket where the cumulative mass
// (from the top) reaches topP, keeps every bucket above it whole and sorts
// only that one bucket to find where the nucleus ends inside it. The result
// is in id order for the whole buckets followed by the cut bucket sorted.
func (s *Sampler) nucleusOfRow(logits []float32, w []float64, r rowStats, topP float64) []int32 {
	floor := 0.5 * r.Sum * (1 - topP) / float64(r.Support)
	lo := math.Log(floor) // every survivor has logit - max in [lo, 0]
	scale := nucleusBuckets / -lo
	bucket := func(x float32) int {
		return min(max(int((float64(x)-r.Max-lo)*scale), 0), nucleusBuckets-1)
	}
	var mass [nucleusBuckets]float64
	cand := s.cand[:0]
	for i, e := range w {
		if e >= floor {
			cand = append(cand, int32(i))
			mass[bucket(logits[i])] += e
		}
	}
	target, cum := topP*r.Sum, 0.0
	cut := 0
	for b := nucleusBuckets - 1; b >= 0; b-- {
		if cum+mass[b] >= target {
			cut = b
			break
		}
		cum += mass[b]
	}
	// Compact the whole buckets to the front and gather the cut one apart.
	kept, edge := 0, s.edge[:0]
	for _, id := range cand {
		switch b := bucket(logits[id]); {
		case b > cut:
			cand[kept] = id
			kept++
		case b == cut:
			edge = append(edge, id)
		}
	}
	slices.SortFunc(edge, func(a, b int32) int {
		if better(logits, a, b) {
			return -1
		}
		return 1
	})
	for _, id := range edge {
		cand[kept] = id // edge came out of cand, so there is room
		kept++
		if cum += w[id]; cum >= target {
			break
		}
	}
	return cand[:kept]
}

// nucleusOfSorted applies top-p to candidates sorted best first: it keeps the
// shortest prefix whose mass, renormalised over the candidates, is >= topP.
func nucleusOfSorted(cand []int32, w []float64, topP float64) []int32 {
	var total float64
	for _, id := range cand {
		total += w[id]
	}
	target, cum := topP*total, 0.0
	for i, id := range cand {
		if cum += w[id]; cum >= target {
			return cand[:i+1]
		}
	}
	return cand
}

// applyMinP keeps the tokens with p_i >= minP * p_max, that is
// w_i = exp(x_i - max) >= minP; truncation never removes the most likely
// token, so the bound is the same before and after renormalising. cand nil
// means the whole row, filtered into dst; otherwise cand is filtered in place,
// keeping its order.
func applyMinP(cand, dst []int32, w []float64, minP float64) []int32 {
	if cand == nil {
		for i, e := range w {
			if e >= minP {
				dst = append(dst, int32(i))
			}
		}
		return dst
	}
	kept := cand[:0]
	for _, id := range cand {
		if w[id] >= minP {
			kept = append(kept, id)
		}
	}
	return kept
}

// draw samples from the candidates (the whole row when cand is nil) with
// weights exp((x_i - max) / T) by inverting the cumulative sum at u·Σ, and
// returns the token and log Σ.
func (s *Sampler) draw(logits []float32, w []float64, cand []int32, max, invT, u float64) (tok int32, logQ float64) {
	if cand == nil {
		q := w
		if invT != 1 {
			q = s.q[:len(logits)]
			for i, x := range logits {
				q[i] = math.Exp((float64(x) - max) * invT)
			}
		}
		i, total := pick(q, u)
		return int32(i), math.Log(total)
	}
	q := s.q[:len(cand)]
	for j, id := range cand {
		if invT == 1 {
			q[j] = w[id]
		} else {
			q[j] = math.Exp((float64(logits[id]) - max) * invT)
		}
	}
	j, total := pick(q, u)
	return cand[j], math.Log(total)
}

// pick returns the first index whose cumulative weight exceeds u times the
// total, and the total. Rounding can leave the sum short of the target; the
// last positive weight is taken then.
func pick(q []float64, u float64) (int, float64) {
	var total float64
	for _, v := range q {
		total += v
	}
	target, cum := u*total, 0.0
	last := 0
	for i, v := range q {
		if v > 0 {
			if cum += v; cum > target {
				return i, total
			}
			last = i
		}
	}
	return last, total
}

// better reports whether token a ranks before token b: higher logit first,
// lower id on ties.
func better(logits []float32, a, b int32) bool {
	la, lb := logits[a], logits[b]
	return la > lb || (la == lb && a < b)
}

// tokenHeap is a binary heap of token ids with the worst (by better) on top,
// as top-k selection needs. It is written out rather than built on
// container/heap so that the hot path makes no interface calls.
type tokenHeap struct {
	ids    []int32
	logits []float32
}

// above reports whether a belongs above b: a is the worse token.
func (h *tokenHeap) above(a, b int32) bool { return better(h.logits, b, a) }

func (h *tokenHeap) init() {
	n := len(h.ids)
	for i := n/2 - 1; i >= 0; i-- {
		h.down(i, n)
	}
}

// down restores the heap property below i within ids[:n].
func (h *tokenHeap) down(i, n int) {
	ids := h.ids
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && h.above(ids[r], ids[c]) {
			c = r
		}
		if !h.above(ids[c], ids[i]) {
			return
		}
		ids[i], ids[c] = ids[c], ids[i]
		i = c
	}
}

// popTo moves the top of the heap ids[:n] to ids[n-1] and re-heaps ids[:n-1].
func (h *tokenHeap) popTo(n int) {
	h.ids[0], h.ids[n-1] = h.ids[n-1], h.ids[0]
	h.down(0, n-1)
}
