package sampler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

const tol = 1e-12

func near(a, b, eps float64) bool {
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return a == b
	}
	return math.Abs(a-b) <= eps
}

func mustNew(t testing.TB, p Params) *Sampler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// lse123 is log(e^1 + e^2 + e^3).
const lse123 = 3.40760596444438

func TestLogSoftmaxAt(t *testing.T) {
	tests := []struct {
		name    string
		logits  []float32
		tok     int32
		want    float64
		entropy float64
	}{
		{"[1,2,3] tok 0", []float32{1, 2, 3}, 0, 1 - lse123, 0.8323955818399389},
		{"[1,2,3] tok 1", []float32{1, 2, 3}, 1, 2 - lse123, 0.8323955818399389},
		{"[1,2,3] tok 2", []float32{1, 2, 3}, 2, 3 - lse123, 0.8323955818399389},
		{"shifted by 1e4", []float32{1e4 + 1, 1e4 + 2, 1e4 + 3}, 2, 3 - lse123, 0.8323955818399389},
		{"large spread", []float32{1e4, -1e4}, 1, -2e4, 0},
		{"-Inf banned", []float32{float32(math.Inf(-1)), 0, 0}, 1, -math.Ln2, math.Ln2},
		{"-Inf token itself", []float32{float32(math.Inf(-1)), 0, 0}, 0, math.Inf(-1), math.Ln2},
		{"single token", []float32{-7}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lp, h, err := LogSoftmaxAt(tt.logits, tt.tok)
			if err != nil {
				t.Fatal(err)
			}
			if !near(lp, tt.want, 1e-9) || !near(h, tt.entropy, 1e-9) {
				t.Errorf("got logprob %.15g entropy %.15g, want %.15g and %.15g", lp, h, tt.want, tt.entropy)
			}
		})
	}
}

func TestUniformRow(t *testing.T) {
	for _, n := range []int{1, 2, 1000, 151936} {
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = 0.25
		}
		lp, h, err := LogSoftmaxAt(logits, int32(n-1))
		if err != nil {
			t.Fatal(err)
		}
		if want := math.Log(float64(n)); !near(h, want, 1e-9) || !near(lp, -want, 1e-9) {
			t.Errorf("n=%d: entropy %g logprob %g, want %g and %g", n, h, lp, want, -want)
		}
	}
}

func TestBadRows(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	rows := map[string][]float32{
		"empty":   {},
		"NaN":     {0, nan, 1},
		"+Inf":    {0, inf},
		"all-Inf": {-inf, -inf},
	}
	s := mustNew(t, Params{Temperature: 1})
	for name, row := range rows {
		if _, err := s.Sample(row, NewRNG(1, "p", 0)); !errors.Is(err, ErrBadLogits) {
			t.Errorf("%s: Sample error %v, want ErrBadLogits", name, err)
		}
		if len(row) > 0 {
			if _, _, err := LogSoftmaxAt(row, 0); !errors.Is(err, ErrBadLogits) {
				t.Errorf("%s: LogSoftmaxAt error %v, want ErrBadLogits", name, err)
			}
		}
	}
	if _, _, err := LogSoftmaxAt([]float32{1, 2}, 2); err == nil {
		t.Error("LogSoftmaxAt accepted a token outside the vocabulary")
	}
}

func TestValidate(t *testing.T) {
	bad := []Params{
		{Temperature: -1}, {Temperature: math.NaN()}, {Temperature: math.Inf(1)},
		{Temperature: 1, TopK: -1}, {Temperature: 1, TopP: 1.5}, {Temperature: 1, TopP: -0.1},
		{Temperature: 1, MinP: 2}, {Temperature: 1, MinP: math.NaN()},
	}
	for _, p := range bad {
		if _, err := New(p); err == nil {
			t.Errorf("New(%+v) accepted", p)
		}
	}
	if _, err := New(Params{Temperature: 0.7, TopK: 40, TopP: 0.95, MinP: 0.05}); err != nil {
		t.Error(err)
	}
}

// TestSamplingLogProb checks the renormalised sampling log-probabilities of
// hand-computed cases on the row [1, 2, 3]; tokens outside the survivors must
// never be drawn.
func TestSamplingLogProb(t *testing.T) {
	logits := []float32{1, 2, 3}
	ninf := math.Inf(-1)
	l1 := -math.Log(1 + math.Exp(-1)) // log p(3) over {2, 3} at T=1: -0.31326…
	l2 := -math.Log(1 + math.Exp(-2)) // log p(3) over {2, 3} at T=0.5: -0.12692…
	l3 := -0.14293162849989968        // log p(3) over {1, 2, 3} at T=0.5
	tests := []struct {
		p    Params
		want [3]float64 // sampling log-prob per token
	}{
		{Params{Temperature: 1}, [3]float64{1 - lse123, 2 - lse123, 3 - lse123}},
		{Params{Temperature: 1, TopK: 2}, [3]float64{ninf, l1 - 1, l1}},
		{Params{Temperature: 1, TopK: 3}, [3]float64{1 - lse123, 2 - lse123, 3 - lse123}},
		{Params{Temperature: 1, TopP: 0.5}, [3]float64{ninf, ninf, 0}},
		{Params{Temperature: 1, TopP: 0.7}, [3]float64{ninf, l1 - 1, l1}},
		{Params{Temperature: 1, MinP: 0.3}, [3]float64{ninf, l1 - 1, l1}}, // e^-1 ≥ 0.3 > e^-2
		{Params{Temperature: 0.5}, [3]float64{l3 - 4, l3 - 2, l3}},
		{Params{Temperature: 0.5, TopK: 2}, [3]float64{ninf, l2 - 2, l2}},
		{Params{Temperature: 0.5, TopP: 0.7}, [3]float64{ninf, l2 - 2, l2}},
		{Params{Temperature: 2, TopK: 2, TopP: 0.99, MinP: 0.5}, [3]float64{ninf, ninf, 0}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.p), func(t *testing.T) {
			s := mustNew(t, tt.p)
			seen := [3]bool{}
			for i := range 300 {
				c, err := s.Sample(logits, NewRNG(7, "row", i))
				if err != nil {
					t.Fatal(err)
				}
				seen[c.Token] = true
				if math.IsInf(tt.want[c.Token], -1) {
					t.Fatalf("drew token %d, which the truncation removes", c.Token)
				}
				if !near(c.SamplingLogProb, tt.want[c.Token], 1e-9) {
					t.Errorf("token %d: sampling logprob %.15g, want %.15g", c.Token, c.SamplingLogProb, tt.want[c.Token])
				}
				if want := float64(logits[c.Token]) - lse123; !near(c.LogProb, want, 1e-9) {
					t.Errorf("token %d: model logprob %.15g, want %.15g", c.Token, c.LogProb, want)
				}
				if !near(c.Entropy, 0.8323955818399389, 1e-9) {
					t.Errorf("entropy %.15g", c.Entropy)
				}
			}
			for tok, w := range tt.want {
				if !math.IsInf(w, -1) && !seen[tok] {
					t.Errorf("token %d never drawn in 300 tries", tok)
				}
			}
		})
	}
}

func TestGreedy(t *testing.T) {
	s := mustNew(t, Params{TopK: 1, TopP: 0.1})
	rng := NewRNG(1, "g", 0)
	before, _ := rng.MarshalBinary()
	c, err := s.Sample([]float32{1, 3, 3, -2}, rng)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != 1 || c.SamplingLogProb != 0 {
		t.Errorf("greedy chose %d with sampling logprob %g, want token 1 (lowest id of the tie) and 0", c.Token, c.SamplingLogProb)
	}
	lp, h, _ := LogSoftmaxAt([]float32{1, 3, 3, -2}, 1)
	if c.LogProb != lp || c.Entropy != h {
		t.Errorf("greedy logprob/entropy %g/%g differ from LogSoftmaxAt %g/%g", c.LogProb, c.Entropy, lp, h)
	}
	after, _ := rng.MarshalBinary()
	if !slices.Equal(before, after) {
		t.Error("greedy decoding consumed random numbers")
	}
}

// TestTies checks that equal logits are truncated by token id, lower first.
func TestTies(t *testing.T) {
	row := []float32{1, 1, 1, 1, 0}
	for _, p := range []Params{{Temperature: 1, TopK: 2}, {Temperature: 1, TopP: 0.4}} {
		s := mustNew(t, p)
		w := make([]float64, len(row))
		r, _ := scan(row, w)
		s.w, s.cand = w, make([]int32, len(row))
		got := slices.Clone(s.truncate(row, w, r))
		slices.Sort(got)
		if !slices.Equal(got, []int32{0, 1}) {
			t.Errorf("%+v kept %v, want [0 1]", p, got)
		}
	}
}

func TestStableExtremes(t *testing.T) {
	ninf := float32(math.Inf(-1))
	s := mustNew(t, Params{Temperature: 0.7, TopK: 3})
	for _, row := range [][]float32{
		{1e4, 1e4 - 1, -1e4, ninf},
		{-1e4, -1e4, -1e4},
		{ninf, ninf, 5, ninf},
	} {
		for i := range 50 {
			c, err := s.Sample(row, NewRNG(3, "x", i))
			if err != nil {
				t.Fatal(err)
			}
			if math.IsInf(float64(row[c.Token]), -1) {
				t.Fatalf("row %v: drew the banned token %d", row, c.Token)
			}
			finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
			if !finite(c.LogProb) || !finite(c.SamplingLogProb) || !finite(c.Entropy) ||
				c.LogProb > 0 || c.SamplingLogProb > 0 || c.Entropy < 0 {
				t.Fatalf("row %v: choice %+v is not a valid set of log-probabilities", row, c)
			}
		}
	}
}

// reference is a plain, full-sort implementation of the truncation chain that
// returns the sampling probability of every token (0 for the removed ones).
func reference(logits []float32, p Params) []float64 {
	ids := []int{}
	for i, x := range logits {
		if !math.IsInf(float64(x), -1) {
			ids = append(ids, i)
		}
	}
	sort.SliceStable(ids, func(a, b int) bool { return logits[ids[a]] > logits[ids[b]] })
	probs := func(ids []int, temp float64) []float64 {
		m := float64(logits[ids[0]])
		ps, z := make([]float64, len(ids)), 0.0
		for j, id := range ids {
			ps[j] = math.Exp((float64(logits[id]) - m) / temp)
			z += ps[j]
		}
		for j := range ps {
			ps[j] /= z
		}
		return ps
	}
	if p.TopK > 0 && p.TopK < len(ids) {
		ids = ids[:p.TopK]
	}
	if p.topP() {
		cum := 0.0
		for j, q := range probs(ids, 1) {
			if cum += q; cum >= p.TopP {
				ids = ids[:j+1]
				break
			}
		}
	}
	if p.MinP > 0 {
		ps := probs(ids, 1)
		for j := range ids {
			if ps[j] < p.MinP*ps[0] {
				ids = ids[:j]
				break
			}
		}
	}
	out := make([]float64, len(logits))
	for j, q := range probs(ids, p.Temperature) {
		out[ids[j]] = q
	}
	return out
}

func gaussianRow(n int, scale float64, r *rand.Rand) []float32 {
	row := make([]float32, n)
	for i := range row {
		row[i] = float32(r.NormFloat64() * scale)
	}
	return row
}

// TestMatchesReference compares the candidate sets and sampling
// log-probabilities with the full-sort reference on random rows.
func TestMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	params := []Params{
		{Temperature: 1}, {Temperature: 0.6},
		{Temperature: 1, TopK: 1}, {Temperature: 1, TopK: 40}, {Temperature: 1.3, TopK: 500},
		{Temperature: 1, TopP: 0.95}, {Temperature: 0.7, TopP: 0.5}, {Temperature: 1, TopP: 0.999},
		{Temperature: 1, MinP: 0.05}, {Temperature: 0.8, MinP: 0.2},
		{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05}, {Temperature: 1, TopK: 200, TopP: 0.8},
	}
	for _, p := range params {
		s := mustNew(t, p)
		for trial := range 20 {
			n := 100 + r.IntN(3000)
			row := gaussianRow(n, 0.5+3*r.Float64(), r)
			want := reference(row, p)

			w := make([]float64, n)
			st, _ := scan(row, w)
			s.w, s.q, s.cand = w, make([]float64, n), make([]int32, n)
			cand := s.truncate(row, w, st)
			kept := 0
			for _, q := range want {
				if q > 0 {
					kept++
				}
			}
			if cand == nil && kept != st.Support || cand != nil && len(cand) != kept {
				t.Fatalf("%+v trial %d: kept %d tokens, reference keeps %d", p, trial, len(cand), kept)
			}
			for _, id := range cand {
				if want[id] == 0 {
					t.Fatalf("%+v trial %d: kept token %d, which the reference removes", p, trial, id)
				}
			}
			for i := range 20 {
				c, err := s.Sample(row, NewRNG(uint64(trial), "ref", i))
				if err != nil {
					t.Fatal(err)
				}
				if !near(c.SamplingLogProb, math.Log(want[c.Token]), 1e-9) {
					t.Fatalf("%+v: token %d sampling logprob %g, reference %g", p, c.Token, c.SamplingLogProb, math.Log(want[c.Token]))
				}
			}
		}
	}
}

// chiSquare001 holds the chi-square critical values at p = 0.001 by degrees
// of freedom.
var chiSquare001 = map[int]float64{1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322, 8: 26.124, 9: 27.877}

// TestFrequencies draws 200k tokens per setting and compares the counts with
// the reference distribution by a chi-square test at p = 0.001. The seeds are
// fixed, so the test is deterministic; it guards against a biased draw.
func TestFrequencies(t *testing.T) {
	if testing.Short() {
		t.Skip("200k draws per setting")
	}
	row := []float32{0.5, -1, 2, 0, 1.5, -0.3, 0.8, -2}
	for _, p := range []Params{
		{Temperature: 1}, {Temperature: 0.7}, {Temperature: 1, TopK: 3}, {Temperature: 1, TopP: 0.8},
		{Temperature: 1.2, MinP: 0.1},
	} {
		t.Run(fmt.Sprintf("%+v", p), func(t *testing.T) {
			const draws = 200_000
			s := mustNew(t, p)
			want := reference(row, p)
			counts := make([]int, len(row))
			rng := NewRNG(42, "chi", 0)
			for range draws {
				c, err := s.Sample(row, rng)
				if err != nil {
					t.Fatal(err)
				}
				counts[c.Token]++
			}
			chi, df := 0.0, -1
			for tok, q := range want {
				if q == 0 {
					if counts[tok] != 0 {
						t.Fatalf("token %d drawn %d times, but truncated", tok, counts[tok])
					}
					continue
				}
				e := q * draws
				chi += (float64(counts[tok]) - e) * (float64(counts[tok]) - e) / e
				df++
			}
			t.Logf("chi-square %.2f, %d degrees of freedom", chi, df)
			if crit := chiSquare001[df]; chi > crit {
				t.Errorf("chi-square %.2f with %d degrees of freedom exceeds %.3f (p = 0.001); counts %v, want probabilities %v", chi, df, crit, counts, want)
			}
		})
	}
}

func TestNoAllocations(t *testing.T) {
	row := gaussianRow(32000, 2, rand.New(rand.NewPCG(3, 4)))
	rng := NewRNG(1, "a", 0)
	for _, p := range []Params{{Temperature: 1}, {Temperature: 0.7, TopP: 0.95}, {Temperature: 1, TopK: 40, MinP: 0.05}, {Temperature: 1, MinP: 0.1}} {
		s := mustNew(t, p)
		if _, err := s.Sample(row, rng); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { s.Sample(row, rng) }); n != 0 {
			t.Errorf("%+v: %v allocations per token", p, n)
		}
	}
}

// TestSampleTop checks the alternatives against a full sort of the row: the
// k best tokens, best first, their log-probs those LogSoftmaxAt gives, the
// draw unchanged from Sample's, banned tokens never listed, k capped.
func TestSampleTop(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	row := gaussianRow(5000, 2, r)
	row[17], row[4000] = row[3], row[3] // ties, broken by id
	row[9] = float32(math.Inf(-1))
	for _, p := range []Params{{}, {Temperature: 1}, {Temperature: 0.7, TopK: 5, TopP: 0.9}} {
		for _, k := range []int{1, 2, 7, 20, 50} {
			s1, s2 := mustNew(t, p), mustNew(t, p)
			for i := range 30 {
				c1, err := s1.Sample(row, NewRNG(3, "p", i))
				if err != nil {
					t.Fatal(err)
				}
				c2, top, err := s2.SampleTop(row, NewRNG(3, "p", i), k, nil)
				if err != nil {
					t.Fatal(err)
				}
				if c1 != c2 {
					t.Fatalf("%+v k %d: SampleTop drew %+v, Sample %+v", p, k, c2, c1)
				}
				ids := make([]int32, len(row))
				for j := range ids {
					ids[j] = int32(j)
				}
				slices.SortFunc(ids, func(a, b int32) int {
					if better(row, a, b) {
						return -1
					}
					return 1
				})
				want := min(k, MaxTop)
				if len(top) != want {
					t.Fatalf("%+v k %d: %d alternatives, want %d", p, k, len(top), want)
				}
				for j, a := range top {
					lp, _, _ := LogSoftmaxAt(row, ids[j])
					if a.Token != ids[j] || a.LogProb != lp {
						t.Fatalf("%+v k %d: alternative %d is %+v, want token %d log-prob %v", p, k, j, a, ids[j], lp)
					}
					if a.Token == c2.Token && a.LogProb != c2.LogProb {
						t.Fatalf("sampled token's alternative %v, choice %v", a.LogProb, c2.LogProb)
					}
				}
			}
		}
	}
	banned := []float32{float32(math.Inf(-1)), 1, float32(math.Inf(-1)), 2}
	_, top, err := mustNew(t, Params{Temperature: 1}).SampleTop(banned, NewRNG(1, "b", 0), 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0].Token != 3 || top[1].Token != 1 {
		t.Fatalf("row with banned tokens: %+v, want tokens 3 and 1 only", top)
	}
}

// TestSampleScanned: a row sampled from its Stats and weights (as the rollout
// engine does after summarising a step's rows in C) gives SampleTop's choice
// and alternatives bit for bit, for every stage of truncation and for greedy
// (whose weights may be nil); LogSoftmaxScanned gives LogSoftmaxAt's numbers;
// Stats that cannot belong to the row, or weights of the wrong length, are
// refused.
func TestSampleScanned(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	logits := make([]float32, 500)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	logits[17] = float32(math.Inf(-1))
	for _, p := range []Params{{Temperature: 1}, {Temperature: 0.7, TopK: 40}, {Temperature: 1.3, TopP: 0.9}, {Temperature: 1, MinP: 0.05}, {}} {
		a, _ := New(p)
		b, _ := New(p)
		w := make([]float64, len(logits))
		st, err := Scan(logits, w)
		if err != nil {
			t.Fatal(err)
		}
		if p.Temperature == 0 {
			w = nil
		}
		ra, rb := NewRNG(3, "p", 1), NewRNG(3, "p", 1)
		for range 20 {
			ca, ta, err := a.SampleTop(logits, ra, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			cb, tb, err := b.SampleScanned(logits, w, st, rb, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ca != cb || !slices.Equal(ta, tb) {
				t.Fatalf("%+v: SampleTop %+v %v, SampleScanned %+v %v", p, ca, ta, cb, tb)
			}
		}
		lp, en, _ := LogSoftmaxAt(logits, 3)
		lp2, en2, err := LogSoftmaxScanned(logits, 3, st)
		if err != nil || lp != lp2 || en != en2 {
			t.Fatalf("LogSoftmaxScanned %v %v %v, LogSoftmaxAt %v %v", lp2, en2, err, lp, en)
		}
	}
	s, _ := New(Params{Temperature: 1})
	w := make([]float64, len(logits))
	st, _ := Scan(logits, w)
	for _, bad := range []Stats{{}, {Max: st.Max, Argmax: 500, Sum: st.Sum, Support: 1}, {Max: st.Max, Argmax: st.Argmax, Sum: 0.5, Support: 1}} {
		if _, _, err := s.SampleScanned(logits, w, bad, NewRNG(1, "p", 0), 0, nil); !errors.Is(err, ErrBadLogits) {
			t.Errorf("stats %+v: err = %v", bad, err)
		}
		if _, _, err := LogSoftmaxScanned(logits, 3, bad); !errors.Is(err, ErrBadLogits) {
			t.Errorf("LogSoftmaxScanned, stats %+v: err = %v", bad, err)
		}
	}
	if _, _, err := s.SampleScanned(logits, w[:10], st, NewRNG(1, "p", 0), 0, nil); err == nil {
		t.Error("10 weights for 500 logits accepted")
	}
	if _, _, err := LogSoftmaxScanned(logits, 500, st); err == nil {
		t.Error("token 500 of 500 accepted")
	}
}
