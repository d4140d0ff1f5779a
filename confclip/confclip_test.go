package confclip

import (
	"bufio"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const tol = 1e-5

func near(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > tol {
			t.Errorf("%s[%d] = %.6f, want %.6f (all: %v)", what, i, got[i], want[i], got)
		}
	}
}

// groupAdvantages runs a reward and an advantage estimator over one group.
func groupAdvantages(t *testing.T, method, adv string, p RewardParams, v, c []float64) (r, a []float64) {
	t.Helper()
	rw, err := NewReward(method, p)
	if err != nil {
		t.Fatal(err)
	}
	af, err := LookupAdvantage(adv)
	if err != nil {
		t.Fatal(err)
	}
	r = make([]float64, len(v))
	a = make([]float64, len(v))
	rw.Group(r, v, c)
	af.Estimate([][]float64{a}, [][]float64{r})
	return r, a
}

// TestWorkedExamples reproduces METHOD.md's worked examples 1 and 2.
func TestWorkedExamples(t *testing.T) {
	p := DefaultRewardParams
	tests := []struct {
		name, method, adv string
		v, c              []float64
		wantR, wantA      []float64
	}{
		{"ex1 confclip grpo", "confclip", "grpo", []float64{1, 1, 0, 0}, []float64{0.8, 0.5, 0.9, 0.3},
			[]float64{0.8, 0.5, -0.9, -0.3}, []float64{1.00401, 0.61536, -1.19834, -0.42104}},
		{"ex1 confclip dr_grpo", "confclip", "dr_grpo", []float64{1, 1, 0, 0}, []float64{0.8, 0.5, 0.9, 0.3},
			[]float64{0.8, 0.5, -0.9, -0.3}, []float64{0.775, 0.475, -0.925, -0.325}},
		{"ex1 confclip rloo", "confclip", "rloo", []float64{1, 1, 0, 0}, []float64{0.8, 0.5, 0.9, 0.3},
			[]float64{0.8, 0.5, -0.9, -0.3}, []float64{1.03333, 0.63333, -1.23333, -0.43333}},
		{"ex1 confclip none", "confclip", "none", []float64{1, 1, 0, 0}, []float64{0.8, 0.5, 0.9, 0.3},
			[]float64{0.8, 0.5, -0.9, -0.3}, []float64{0.8, 0.5, -0.9, -0.3}},
		{"ex1 binary grpo", "binary", "grpo", []float64{1, 1, 0, 0}, []float64{0.8, 0.5, 0.9, 0.3},
			[]float64{1, 1, 0, 0}, []float64{0.86602, 0.86602, -0.86602, -0.86602}},
		{"ex2 confclip grpo", "confclip", "grpo", []float64{1, 1, 1, 1}, []float64{0.97, 0.6, 0.8, 0.99},
			[]float64{0.95, 0.6, 0.8, 0.95}, []float64{0.75377, -1.35679, -0.15075, 0.75377}},
		{"ex2 binary grpo", "binary", "grpo", []float64{1, 1, 1, 1}, []float64{0.97, 0.6, 0.8, 0.99},
			[]float64{1, 1, 1, 1}, []float64{0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, a := groupAdvantages(t, tt.method, tt.adv, p, tt.v, tt.c)
			near(t, "r", r, tt.wantR)
			near(t, "A", a, tt.wantA)
		})
	}
}

// TestWorkedExample4 reproduces METHOD.md's worked example 4: batch
// scaling over two groups of two.
func TestWorkedExample4(t *testing.T) {
	r := [][]float64{{1, 0}, {0.5, 0.5}}
	a := [][]float64{make([]float64, 2), make([]float64, 2)}
	GRPOBatch(a, r)
	near(t, "batch A", append(a[0], a[1]...), []float64{1.22474, -1.22474, 0, 0})
	for gi := range r {
		GRPO(a[gi], r[gi])
	}
	near(t, "group A", append(a[0], a[1]...), []float64{0.70711, -0.70711, 0, 0})
}

// TestAllWrongGroupScaling shows the mechanism of the ConfClip + GRPO
// collapse on a weak model: in a group whose answers are all wrong the
// ConfClip rewards differ only by the small spread of the confidences, and
// GRPO's per-group std turns that spread into unit-size advantages, so the
// least confident wrong answer is reinforced as hard as a right answer
// would be. With the batch's std (a batch that also holds a group with a
// right answer) the same group's advantages stay small.
func TestAllWrongGroupScaling(t *testing.T) {
	rw, err := NewReward("confclip", DefaultRewardParams)
	if err != nil {
		t.Fatal(err)
	}
	wrong, mixed := make([]float64, 4), make([]float64, 4)
	rw.Group(wrong, []float64{0, 0, 0, 0}, []float64{0.31, 0.30, 0.29, 0.305})
	rw.Group(mixed, []float64{1, 0, 0, 0}, []float64{0.6, 0.3, 0.35, 0.4})
	group := make([]float64, 4)
	GRPO(group, wrong)
	if group[2] < 1 {
		t.Fatalf("group scaling: the least confident wrong answer gets A = %.3f; the mechanism needs it >= 1", group[2])
	}
	batch := [][]float64{make([]float64, 4), make([]float64, 4)}
	GRPOBatch(batch, [][]float64{wrong, mixed})
	for i, x := range batch[0] {
		if math.Abs(x) > 0.05 {
			t.Errorf("batch scaling: all-wrong group's A[%d] = %.3f, want |A| <= 0.05 (group scaling gave %.3f)", i, x, group[i])
		}
	}
	if batch[1][0] < 1 {
		t.Errorf("batch scaling: the right answer's A = %.3f, want >= 1", batch[1][0])
	}
}

// TestConfidenceExample reproduces METHOD.md's worked example 3.
func TestConfidenceExample(t *testing.T) {
	l := []float64{-0.1, -0.5, -0.05, -1.2}
	for _, tt := range []struct {
		name string
		want float64
	}{{"geo_mean", 0.629707}, {"arith_mean", 0.690948}, {"min", 0.301194}} {
		e, err := LookupConfidence(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Estimate(l, nil, 0); math.Abs(got-tt.want) > tol {
			t.Errorf("%s = %.6f, want %.6f", tt.name, got, tt.want)
		}
	}
	// neg_entropy: mean H = log(V)/4 gives c = 0.75.
	h := math.Log(1000)
	if got := NegEntropy([]float64{0, h / 2, h / 2, 0}, 1000); math.Abs(got-0.75) > 1e-12 {
		t.Errorf("neg_entropy = %v, want 0.75", got)
	}
}

func TestRelativeWeights(t *testing.T) {
	c := []float64{0.9, 0.5, 0.6, 0.2} // mean 0.55
	w := make([]float64, 4)
	RelativeWeights(w, c, 0.2)
	near(t, "w", w, []float64{1.2, 0.5 / 0.55, 0.6 / 0.55, 0.8})
	RelativeWeights(w, []float64{0, 0, 0, 0}, 0.2)
	near(t, "w(all zero)", w, []float64{1, 1, 1, 1})
}

func TestAnswerTokens(t *testing.T) {
	// Tokens: [0,3) [3,5) [5,9) [9,12).
	off := []int{0, 3, 5, 9}
	tests := []struct {
		start, end, lo, hi int
		ok                 bool
	}{
		{5, 9, 2, 3, true},
		{4, 6, 1, 3, true},
		{0, 12, 0, 4, true},
		{9, 12, 3, 4, true},
		{11, 40, 3, 4, true},
		{12, 13, 4, 4, false},
		{-1, -1, 0, 0, false},
		{3, 3, 0, 0, false},
	}
	for _, tt := range tests {
		lo, hi, ok := AnswerTokens(off, 12, tt.start, tt.end)
		if lo != tt.lo || hi != tt.hi || ok != tt.ok {
			t.Errorf("AnswerTokens(%d, %d) = %d, %d, %v; want %d, %d, %v", tt.start, tt.end, lo, hi, ok, tt.lo, tt.hi, tt.ok)
		}
	}
	if _, _, ok := AnswerTokens(nil, 12, 0, 5); ok {
		t.Error("no offsets: want !ok")
	}
}

func TestOverlongPenalty(t *testing.T) {
	for _, tt := range []struct {
		T    int
		want float64
	}{{0, 0}, {80, 0}, {90, -0.5}, {100, -1}, {101, -1}} {
		if got := OverlongPenalty(tt.T, 100, 20); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("OverlongPenalty(%d) = %v, want %v", tt.T, got, tt.want)
		}
	}
	if got := OverlongPenalty(101, 100, 0); got != -1 {
		t.Errorf("hard limit: %v, want -1", got)
	}
	r := []float64{1, 0}
	Shaping{FormatWeight: 0.5, Overlong: true, MaxLen: 100, CacheLen: 20}.Apply(r, []float64{1, 0}, []int{90, 10}, nil)
	near(t, "shaped", r, []float64{1, 0})
}

func TestStats(t *testing.T) {
	st := RewardStatsOf("binary", [][]float64{{1, 1, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}})
	if st.ZeroStdGroups != 2 || math.Abs(st.ZeroStdFraction-2.0/3) > 1e-12 || math.Abs(st.Mean-0.5) > 1e-12 {
		t.Errorf("RewardStatsOf = %+v", st)
	}
	o := OutcomeStatsOf([][]bool{{true, false}, {false, false}}, [][]int{{10, 20}, {30, -1}})
	want := OutcomeStats{Groups: 2, Completions: 4, G: 2, Correct: 1, Accuracy: 0.25, PassAt1: 0.25, PassAtG: 0.5, MeanTokensRight: 10, MeanTokensWrong: 25}
	if o != want {
		t.Errorf("OutcomeStatsOf = %+v, want %+v", o, want)
	}
	for _, tt := range []struct {
		n, c, k int
		want    float64
	}{{4, 1, 1, 0.25}, {4, 2, 4, 1}, {5, 2, 2, 0.7}, {5, 0, 2, 0}} {
		if got := PassAtK(tt.n, tt.c, tt.k); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("PassAtK(%d,%d,%d) = %v, want %v", tt.n, tt.c, tt.k, got, tt.want)
		}
	}
}

func TestCalibration(t *testing.T) {
	// scikit-learn's roc_auc_score example.
	if auc, ok := AUROC([]float64{0.1, 0.4, 0.35, 0.8}, []bool{false, false, true, true}); !ok || math.Abs(auc-0.75) > 1e-12 {
		t.Errorf("AUROC = %v, %v; want 0.75", auc, ok)
	}
	if auc, _ := AUROC([]float64{0.5, 0.5, 0.5}, []bool{true, false, true}); auc != 0.5 {
		t.Errorf("AUROC of ties = %v, want 0.5", auc)
	}
	if _, ok := AUROC([]float64{0.5, 0.7}, []bool{true, true}); ok {
		t.Error("AUROC with one class: want !ok")
	}
	conf := []float64{0.95, 0.95, 0.15, 0.15}
	ok := []bool{true, false, false, false}
	// Bin 9: acc 0.5, conf 0.95; bin 1: acc 0, conf 0.15.
	if got, want := ECE(conf, ok, 10), (2*0.45+2*0.15)/4; math.Abs(got-want) > 1e-12 {
		t.Errorf("ECE = %v, want %v", got, want)
	}
	if got, want := Brier(conf, ok), (0.05*0.05+0.95*0.95+2*0.15*0.15)/4; math.Abs(got-want) > 1e-12 {
		t.Errorf("Brier = %v, want %v", got, want)
	}
}

// TestRightAboveWrong checks that with lambda > 0 and a positive lower clip
// every right answer's reward exceeds every wrong one's, in random groups.
func TestRightAboveWrong(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		n := 1 + rng.IntN(32)
		p := RewardParams{Weight: "absolute", Lambda: 0.01 + 3*rng.Float64()}
		p.Lo = 0.01 + 0.5*rng.Float64()
		p.Hi = p.Lo + rng.Float64()
		if trial%2 == 1 {
			p.Weight, p.Eps = "relative", 0.99*rng.Float64()
		}
		v, c := make([]float64, n), make([]float64, n)
		for i := range v {
			v[i] = float64(rng.IntN(2))
			c[i] = randConfidence(rng)
		}
		r, _ := groupAdvantages(t, "confclip", "grpo", p, v, c)
		lowRight, highWrong := math.Inf(1), math.Inf(-1)
		for i := range r {
			if v[i] == 1 {
				lowRight = min(lowRight, r[i])
			} else {
				highWrong = max(highWrong, r[i])
			}
		}
		if lowRight <= highWrong {
			t.Fatalf("params %+v, v %v, c %v: right %v <= wrong %v", p, v, c, lowRight, highWrong)
		}
	}
}

func randConfidence(rng *rand.Rand) float64 {
	switch rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return 1
	}
	return rng.Float64()
}

// TestPermutation checks that permuting a group permutes its rewards and
// advantages.
func TestPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		n := 1 + rng.IntN(50)
		v, c := make([]float64, n), make([]float64, n)
		for i := range v {
			v[i] = float64(rng.IntN(2))
			c[i] = rng.Float64()
		}
		perm := rng.Perm(n)
		pv, pc := make([]float64, n), make([]float64, n)
		for i, j := range perm {
			pv[i], pc[i] = v[j], c[j]
		}
		p := DefaultRewardParams
		if trial%2 == 1 {
			p.Weight = "relative"
		}
		for _, adv := range AdvantageNames() {
			r, a := groupAdvantages(t, "confclip", adv, p, v, c)
			pr, pa := groupAdvantages(t, "confclip", adv, p, pv, pc)
			for i, j := range perm {
				if math.Abs(pr[i]-r[j]) > 1e-12 || math.Abs(pa[i]-a[j]) > 1e-9 {
					t.Fatalf("%s, n=%d: permuted (r, A)[%d] = (%v, %v), want (%v, %v)", adv, n, i, pr[i], pa[i], r[j], a[j])
				}
			}
		}
	}
}

// TestFinite feeds degenerate inputs everywhere and checks that no NaN or
// Inf comes out.
func TestFinite(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	logprobs := [][]float64{nil, {}, {-inf}, {nan}, {inf}, {-inf, -0.1}, {0, 0}, {-1e308, -1e308}, {1e-9}}
	var confs []float64
	for _, l := range logprobs {
		for _, name := range ConfidenceNames() {
			e, _ := LookupConfidence(name)
			c := e.Estimate(l, l, 32000)
			checkFinite(t, name, c)
			if c < 0 || c > 1 {
				t.Errorf("%s(%v) = %v, outside [0, 1]", name, l, c)
			}
			confs = append(confs, c)
		}
	}
	checkFinite(t, "neg_entropy V=0", NegEntropy([]float64{1}, 0))

	huge := 100_000
	groups := [][]float64{{1}, {0}, {1, 1, 1}, {0, 0}, make([]float64, huge), confs[:4]}
	for i := range groups[4] {
		groups[4][i] = float64(i % 2)
	}
	for _, v := range groups {
		c := make([]float64, len(v))
		for i := range c {
			c[i] = confs[i%len(confs)]
		}
		for _, method := range RewardNames() {
			for _, w := range WeightNames() {
				p := DefaultRewardParams
				p.Weight = w
				for _, adv := range AdvantageNames() {
					r, a := groupAdvantages(t, method, adv, p, v, c)
					checkFinite(t, method+"/"+w+"/"+adv+" reward", r...)
					checkFinite(t, method+"/"+w+"/"+adv+" advantage", a...)
					if len(v) == 1 && (adv == "grpo" || adv == "rloo") && a[0] != 0 {
						t.Errorf("%s: group of one has A = %v, want 0", adv, a[0])
					}
				}
			}
		}
		st := RewardStatsOf("x", [][]float64{v})
		checkFinite(t, "stats", st.Mean, st.Std, st.GroupStdMean, st.ZeroStdFraction)
	}
	// Equal rewards give exactly zero advantages, whatever their value.
	for _, x := range []float64{0.1, 0.7, -0.3, 1.0 / 3} {
		r := slices.Repeat([]float64{x}, 7)
		a := make([]float64, 7)
		GRPO(a, r)
		if !ZeroStd(r) || slices.ContainsFunc(a, func(x float64) bool { return x != 0 }) {
			t.Errorf("equal rewards %v: A = %v, want 0", x, a)
		}
	}
	empty := RewardStatsOf("x", nil)
	o := OutcomeStatsOf(nil, nil)
	cal := Calibrate(nil, nil)
	checkFinite(t, "empty stats", empty.Mean, empty.Std, o.Accuracy, o.PassAt1, o.PassAtG, cal.ECE, cal.Brier, cal.AUROC)
	cal = Calibrate([]float64{nan, inf, -inf}, []bool{true, false, true})
	checkFinite(t, "calibration", cal.ECE, cal.Brier, cal.AUROC)
}

func checkFinite(t *testing.T, what string, xs ...float64) {
	t.Helper()
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("%s[%d] = %v", what, i, x)
		}
	}
}

// methodNames are the config names METHOD.md lists for the keys this package
// owns.
var methodNames = map[string][]string{
	"confidence.estimator": {"geo_mean", "arith_mean", "min", "neg_entropy"},
	"confidence.scope":     {"completion", "answer"},
	"reward.method":        {"confclip", "binary"},
	"reward.weight":        {"absolute", "relative"},
	"advantage.estimator":  {"grpo", "dr_grpo", "rloo", "none"},
}

func resolve(key, name string) error {
	var err error
	switch key {
	case "confidence.estimator":
		_, err = LookupConfidence(name)
	case "confidence.scope":
		err = CheckScope(name)
	case "reward.method":
		_, err = NewReward(name, DefaultRewardParams)
	case "reward.weight":
		p := DefaultRewardParams
		p.Weight = name
		_, err = NewReward("confclip", p)
	case "advantage.estimator":
		_, err = LookupAdvantage(name)
	}
	return err
}

// TestRegistry checks that every name METHOD.md gives resolves, both from
// the list above and, where the documents are at hand, from their text.
func TestRegistry(t *testing.T) {
	for key, names := range methodNames {
		for _, n := range names {
			if err := resolve(key, n); err != nil {
				t.Errorf("%s = %q: %v", key, n, err)
			}
		}
	}
	for _, doc := range []string{"../../shared/docs/METHOD.md", "../docs/method.md"} {
		found := namesInDoc(t, doc)
		if found == nil {
			t.Logf("%s: not found, skipped", doc)
			continue
		}
		t.Logf("%s: %v", doc, found)
		for key, names := range found {
			if _, ours := methodNames[key]; !ours {
				continue
			}
			for _, n := range names {
				if err := resolve(key, n); err != nil {
					t.Errorf("%s: %s = %q: %v", doc, key, n, err)
				}
			}
		}
		for _, key := range []string{"confidence.estimator", "reward.method", "reward.weight", "advantage.estimator"} {
			if len(found[key]) == 0 {
				t.Errorf("%s: found no names for %s", doc, key)
			}
		}
	}
}

var (
	keyValue  = regexp.MustCompile("`([a-z_]+\\.[a-z_]+) = \"([a-z_]+)\"`")
	keyList   = regexp.MustCompile("^`([a-z_]+\\.[a-z_]+)`[^`]*(`[a-z_]+`[^`]*)?:$")
	bulletKey = regexp.MustCompile("^- `([a-z_]+)`")
)

// namesInDoc reads the config names a method document gives: `key = "name"`
// anywhere, and "- `name`" bullets under a line that starts with `key` and
// ends with a colon.
func namesInDoc(t *testing.T, path string) map[string][]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	found := map[string][]string{}
	list := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" || raw[0] == ' ' || raw[0] == '\t' {
			continue // blank lines and a bullet's continuation keep the list open
		}
		for _, m := range keyValue.FindAllStringSubmatch(line, -1) {
			found[m[1]] = append(found[m[1]], m[2])
		}
		if m := keyList.FindStringSubmatch(line); m != nil {
			list = m[1]
			continue
		}
		if m := bulletKey.FindStringSubmatch(line); m != nil && list != "" {
			found[list] = append(found[list], m[1])
			continue
		}
		list = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return found
}

// TestAdvantageRegistry: the registry refuses a second estimator under a
// taken name and one without a name or function; GRPO with the batch's std
// is registered like the rest and is what advantage.scale = "batch" picks;
// an estimator sees the whole batch.
func TestAdvantageRegistry(t *testing.T) {
	for _, name := range AdvantageNames() {
		if err := RegisterAdvantage(AdvantageEstimator{Name: name, Estimate: PerGroup(RawReward)}); err == nil {
			t.Errorf("RegisterAdvantage(%q) again: no error", name)
		}
	}
	if err := RegisterAdvantage(AdvantageEstimator{Estimate: PerGroup(RawReward)}); err == nil {
		t.Error("RegisterAdvantage without a name: no error")
	}
	if err := RegisterAdvantage(AdvantageEstimator{Name: "no_function"}); err == nil {
		t.Error("RegisterAdvantage without a function: no error")
	}
	if _, err := LookupAdvantage("no_function"); err == nil {
		t.Error("a refused estimator was registered")
	}
	for _, c := range []struct{ estimator, scale, want string }{
		{"grpo", "", "grpo"}, {"grpo", ScaleGroup, "grpo"}, {"grpo", ScaleBatch, "grpo_batch"},
		{"grpo", ScaleNone, "dr_grpo"}, {"rloo", ScaleGroup, "rloo"}, {"rloo", ScaleBatch, ""}, {"grpo", "std", ""},
	} {
		e, err := AdvantageFor(c.estimator, c.scale)
		if (err == nil) != (c.want != "") || (err == nil && e.Name != c.want) {
			t.Errorf("AdvantageFor(%q, %q) = %q, %v; want %q", c.estimator, c.scale, e.Name, err, c.want)
		}
	}
	// grpo_batch through the registry: the batch's std, each group's mean.
	e, err := LookupAdvantage("grpo_batch")
	if err != nil || !e.Batch {
		t.Fatalf("grpo_batch: %+v, %v", e, err)
	}
	r := [][]float64{{0, 0, 0, 1}, {1, 1, 1, 1}, {0.5, -0.5}}
	a := [][]float64{make([]float64, 4), make([]float64, 4), make([]float64, 2)}
	e.Estimate(a, r)
	_, std := MeanStd([]float64{0, 0, 0, 1, 1, 1, 1, 1, 0.5, -0.5})
	for g := range r {
		mean, _ := MeanStd(r[g])
		for i := range r[g] {
			if want := (r[g][i] - mean) / (std + GRPOEps); math.Abs(a[g][i]-want) > 1e-12 {
				t.Errorf("grpo_batch A[%d][%d] = %v, want %v", g, i, a[g][i], want)
			}
		}
	}
	for _, name := range []string{"grpo", "dr_grpo", "rloo", "none"} {
		if e, _ := LookupAdvantage(name); e.Batch {
			t.Errorf("%s: marked as needing the batch", name)
		}
	}
}
