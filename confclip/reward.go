package confclip

import (
	"errors"
	"fmt"
	"math"
)

// RewardParams are the knobs of the ConfClip reward (config table [reward]).
type RewardParams struct {
	Weight string  // reward.weight: absolute or relative
	Lo, Hi float64 // reward.lo, reward.hi: clip band of the absolute weight
	Eps    float64 // reward.eps: half-width of the relative band [1-eps, 1+eps]
	Lambda float64 // reward.lambda: penalty on wrong answers (0 = none)
}

// DefaultRewardParams are the defaults of METHOD.md.
var DefaultRewardParams = RewardParams{Weight: "absolute", Lo: 0.2, Hi: 0.95, Eps: 0.2, Lambda: 1}

// Reward is a reward method ready to apply to groups.
type Reward struct {
	Name string
	// NeedsConfidence is set when Group reads the confidences.
	NeedsConfidence bool
	// Stated is set when Group reads the confidence each completion states
	// (StatedConfidence; NaN where it states none) in place of the model's.
	Stated bool
	// SelfCertainty is set when Group reads the completions'
	// self-certainties (SelfCertainty) in place of the confidences.
	SelfCertainty bool
	// AnswerProb is set when Group reads the completions' debiased
	// reference-answer probabilities (DebiasAnswerProb), which need the
	// model, in place of the confidences.
	AnswerProb bool
	// Group fills r with the rewards of one group from the verifier scores
	// v (in [0, 1]) and, when NeedsConfidence, the confidences c. r, v and c
	// have one entry per completion; c may be nil otherwise.
	Group func(r, v, c []float64)
}

var rewardMethods = map[string]func(RewardParams) (Reward, error){
	"confclip": newConfClip,
	"binary": func(RewardParams) (Reward, error) {
		return Reward{Name: "binary", Group: func(r, v, _ []float64) { Binary(r, v) }}, nil
	},
	"rlcr": func(RewardParams) (Reward, error) {
		return Reward{Name: "rlcr", Stated: true, Group: RLCR}, nil
	},
	"self_certainty": newSelfCertainty,
	"answer_prob":    newAnswerProb,
}

// NewReward builds the reward registered under a reward.method name; p is
// read by the methods that need it and checked here.
func NewReward(method string, p RewardParams) (Reward, error) {
	build, ok := rewardMethods[method]
	if !ok {
		return Reward{}, fmt.Errorf("unknown reward method %q (known: %v)", method, RewardNames())
	}
	return build(p)
}

// RewardNames lists the reward.method names, sorted.
func RewardNames() []string { return sortedKeys(rewardMethods) }

// WeightNames lists the reward.weight names, sorted.
func WeightNames() []string { return sortedKeys(weightFuncs) }

// weightFuncs compute the ConfClip weights w of a group from confidences c.
var weightFuncs = map[string]func(w, c []float64, p RewardParams){
	"absolute": func(w, c []float64, p RewardParams) { AbsoluteWeights(w, c, p.Lo, p.Hi) },
	"relative": func(w, c []float64, p RewardParams) { RelativeWeights(w, c, p.Eps) },
}

func newConfClip(p RewardParams) (Reward, error) {
	weights, ok := weightFuncs[p.Weight]
	if !ok {
		return Reward{}, fmt.Errorf("unknown reward weight %q (known: %v)", p.Weight, WeightNames())
	}
	if !finite(p.Lambda) || p.Lambda < 0 {
		return Reward{}, fmt.Errorf("reward.lambda = %v: want a finite value >= 0", p.Lambda)
	}
	switch p.Weight {
	case "absolute":
		if !finite(p.Lo) || !finite(p.Hi) || p.Lo < 0 || p.Lo > p.Hi {
			return Reward{}, fmt.Errorf("reward.lo = %v, reward.hi = %v: want 0 <= lo <= hi", p.Lo, p.Hi)
		}
	case "relative":
		if !finite(p.Eps) || p.Eps < 0 || p.Eps > 1 {
			return Reward{}, fmt.Errorf("reward.eps = %v: want 0 <= eps <= 1", p.Eps)
		}
	}
	return Reward{Name: "confclip", NeedsConfidence: true, Group: func(r, v, c []float64) {
		weights(r, c, p)
		ConfClip(r, v, r, p.Lambda)
	}}, nil
}

// ConfClip is the ConfClip reward of a group given its clipped weights w
// (AbsoluteWeights or RelativeWeights):
//
//	r_i = v_i w_i - λ (1 - v_i) w_i.
//
// A right answer (v = 1) earns its weight, a wrong one (v = 0) loses λ times
// its weight, so with λ > 0 and a lower clip > 0 every right answer scores
// above every wrong one, and a group that is all right or all wrong still has
// spread unless its weights are all clipped to the same bound. r may alias w.
// Source: this project's reading of ConfClip (arXiv 2509.17730), docs/method.md.
func ConfClip(r, v, w []float64, lambda float64) {
	for i := range r {
		vi := clamp(v[i], 0, 1)
		r[i] = vi*w[i] - lambda*(1-vi)*w[i]
	}
}

// AbsoluteWeights clips each confidence into a band,
//
//	w_i = clip(c_i, lo, hi),
//
// so that confidence never counts for less than lo (a right answer always
// earns something) nor more than hi (no push toward over-confidence).
func AbsoluteWeights(w, c []float64, lo, hi float64) {
	for i := range w {
		w[i] = clamp(c[i], lo, hi)
	}
}

// RelativeWeights weighs each confidence against the group's mean, inside a
// PPO-style band,
//
//	w_i = clip(c_i / mean_j c_j, 1 - eps, 1 + eps).
//
// A group whose mean confidence is 0 (every completion has a -Inf log-prob)
// gets w = 1 throughout.
func RelativeWeights(w, c []float64, eps float64) {
	var s float64
	for _, ci := range c {
		s += clamp(ci, 0, 1)
	}
	mean := s / float64(len(c))
	for i := range w {
		g := 1.0
		if mean > 0 {
			g = clamp(c[i], 0, 1) / mean
		}
		w[i] = clamp(g, 1-eps, 1+eps)
	}
}

// Binary is the RLVR baseline reward, r_i = v_i.
func Binary(r, v []float64) {
	for i := range r {
		r[i] = clamp(v[i], 0, 1)
	}
}

// Shaping is the optional reward shaping added on top of any reward (config
// keys reward.format_weight, reward.overlong, reward.max_len,
// reward.cache_len, reward.self_certainty_weight). The zero value adds
// nothing.
type Shaping struct {
	FormatWeight float64 // weight of the format verifier's score
	Overlong     bool    // DAPO soft overlong punishment
	MaxLen       int     // overlong: maximum completion length in tokens
	CacheLen     int     // overlong: length of the soft band below MaxLen
	// SelfCertaintyWeight weighs the completion's self-certainty
	// (SelfCertainty), added to a verifier's reward: ConfClip plus
	// self-certainty, say.
	SelfCertaintyWeight float64
}

// Check reports a shaping whose numbers cannot be used.
func (s Shaping) Check() error {
	if !finite(s.FormatWeight) {
		return errors.New("reward.format_weight must be finite")
	}
	if !finite(s.SelfCertaintyWeight) {
		return errors.New("reward.self_certainty_weight must be finite")
	}
	if s.Overlong && (s.MaxLen <= 0 || s.CacheLen < 0 || s.CacheLen > s.MaxLen) {
		return fmt.Errorf("reward.max_len = %d, reward.cache_len = %d: want 0 <= cache_len <= max_len and max_len > 0", s.MaxLen, s.CacheLen)
	}
	return nil
}

// Apply adds the shaping terms to the rewards of a group:
//
//	r_i += format_weight * f_i + overlong(T_i) + self_certainty_weight * sc_i,
//
// with f_i the format verifier's score (format may be nil when FormatWeight
// is 0), T_i the completion length in tokens (lengths may be nil when
// Overlong is off) and sc_i its self-certainty (sc may be nil when
// SelfCertaintyWeight is 0).
func (s Shaping) Apply(r, format []float64, lengths []int, sc []float64) {
	for i := range r {
		if s.FormatWeight != 0 {
			r[i] += s.FormatWeight * clamp(format[i], 0, 1)
		}
		if s.Overlong {
			r[i] += OverlongPenalty(lengths[i], s.MaxLen, s.CacheLen)
		}
		if s.SelfCertaintyWeight != 0 {
			r[i] += s.SelfCertaintyWeight * sc[i]
		}
	}
}

// OverlongPenalty is DAPO's soft overlong punishment (Yu et al. 2025,
// arXiv 2503.14476, eq. 13) of a completion of T tokens:
//
//	0                              if T <= L_max - L_cache
//	((L_max - L_cache) - T)/L_cache if L_max - L_cache < T <= L_max
//	-1                             if T > L_max
func OverlongPenalty(T, maxLen, cacheLen int) float64 {
	switch soft := maxLen - cacheLen; {
	case T <= soft:
		return 0
	case T <= maxLen:
		return float64(soft-T) / float64(cacheLen)
	}
	return -1
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
