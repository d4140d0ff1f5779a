package train

import (
	"fmt"
	"math"
)

// Loss aggregations (METHOD.md "Loss for the training step").
const (
	TokenMean           = "token_mean"              // Z = sum_i T_i (DAPO)
	SeqMeanTokenMean    = "seq_mean_token_mean"     // per sequence / T_i, then / G (GRPO)
	SeqMeanTokenSumNorm = "seq_mean_token_sum_norm" // Z = G * max_tokens (Dr. GRPO)
)

// lossTypes maps TRL's GRPOConfig.loss_type names onto the aggregations
// (TRL's dapo normalises by the tokens of the whole global batch, bnpo by
// those of the local batch: one batch here, so both are token_mean).
var lossTypes = map[string]string{
	"grpo":    SeqMeanTokenMean,
	"bnpo":    TokenMean,
	"dr_grpo": SeqMeanTokenSumNorm,
	"dapo":    TokenMean,
}

// Aggregation is how a batch's token terms are summed into its loss (the
// sequence factors z_i of SeqNorms), parsed once from its train.loss_agg
// name by ParseAggregation.
type Aggregation int

const (
	AggTokenMean           Aggregation = iota // TokenMean
	AggSeqMeanTokenMean                       // SeqMeanTokenMean
	AggSeqMeanTokenSumNorm                    // SeqMeanTokenSumNorm
)

var aggNames = [...]string{TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm}

// String is the aggregation's train.loss_agg name.
func (a Aggregation) String() string {
	if a < 0 || int(a) >= len(aggNames) {
		return fmt.Sprintf("Aggregation(%d)", int(a))
	}
	return aggNames[a]
}

// ParseAggregation reads a train.loss_agg value: one of the aggregations,
// or one of TRL's loss-type names (grpo, bnpo, dr_grpo, dapo) for it.
func ParseAggregation(name string) (Aggregation, error) {
	if agg, ok := lossTypes[name]; ok {
		name = agg
	}
	for i, n := range aggNames {
		if n == name {
			return Aggregation(i), nil
		}
	}
	return 0, fmt.Errorf("unknown loss aggregation %q (want %s, %s or %s, or TRL's loss types grpo, bnpo, dr_grpo, dapo)",
		name, TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm)
}

// LossAgg resolves a train.loss_agg value to the aggregation's name
// (ParseAggregation).
func LossAgg(name string) (string, error) {
	a, err := ParseAggregation(name)
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

// TokenTerm is one completion token's term of the loss (METHOD.md
// "Scaling, several updates per batch, KL"), at the current parameters.
type TokenTerm struct {
	Ratio   float64 // rho = exp(log pi_theta - old)
	Clipped bool    // the clipped side of the min was taken: no gradient from J
	KL      float64 // k3 estimate of KL(pi_theta || ref); 0 when beta = 0
	Loss    float64 // l = -J + beta * KL
	// Grad is dl/d(log pi_theta): the token's loss moves with its own
	// log-probability at this rate, so the loss's gradient in the
	// parameters is Grad * grad(log pi_theta).
	Grad float64
}

// TokenLogProbs are one completion token's log-probabilities: at the
// current parameters, under the rollout's policy (old) and under the
// reference model.
type TokenLogProbs struct {
	Cur, Old, Ref float64
}

// TokenLoss computes one token's term from its advantage a and its
// log-probabilities lp under the objective's settings:
//
//	rho = exp(cur - old)
//	J   = min(rho*a, clip(rho, 1-EpsLow, 1+EpsHigh)*a)     (PPO; DAPO's clip-higher)
//	KL  = exp(ref - cur) - (ref - cur) - 1                  (k3, Schulman 2020)
//	l   = -J + Beta*KL
//
// dJ/dcur is rho*a where the unclipped side is the minimum and 0 where the
// clipped side is strictly smaller (the ratio left the band in the
// direction the advantage pushes); dKL/dcur = 1 - exp(ref - cur).
func (o Objective) TokenLoss(a float64, lp TokenLogProbs) TokenTerm {
	rho := math.Exp(lp.Cur - lp.Old)
	unclipped := rho * a
	clipped := min(max(rho, 1-o.EpsLow), 1+o.EpsHigh) * a
	t := TokenTerm{Ratio: rho}
	var dJ float64
	if clipped < unclipped {
		t.Clipped = true
		t.Loss = -clipped
	} else {
		t.Loss = -unclipped
		dJ = unclipped
	}
	t.Grad = -dJ
	if o.Beta != 0 {
		d := lp.Ref - lp.Cur
		t.KL = math.Exp(d) - d - 1
		t.Loss += o.Beta * t.KL
		t.Grad += o.Beta * (1 - math.Exp(d))
	}
	return t
}

// SeqNorms gives each sequence's factor z_i in L = sum_i z_i sum_t l_{i,t}
// for the aggregation a, from the completion lengths. A masked
// completion (advantage.mask_truncated) has z = 0 and leaves the
// denominators too: it counts neither in the tokens of token_mean nor in
// the G of the other two.
func SeqNorms(a Aggregation, lens []int, masked []bool, maxTokens int) ([]float64, error) {
	if a < 0 || int(a) >= len(aggNames) {
		return nil, fmt.Errorf("unknown loss aggregation %v", a)
	}
	z := make([]float64, len(lens))
	g, tokens := 0, 0
	for i, n := range lens {
		if masked == nil || !masked[i] {
			g++
			tokens += n
		}
	}
	if g == 0 {
		return z, nil
	}
	if a == AggSeqMeanTokenSumNorm && maxTokens <= 0 {
		return nil, fmt.Errorf("loss aggregation %s needs the rollout's max tokens", SeqMeanTokenSumNorm)
	}
	for i, n := range lens {
		if masked != nil && masked[i] || n == 0 {
			continue
		}
		switch a {
		case AggTokenMean:
			z[i] = 1 / float64(tokens)
		case AggSeqMeanTokenMean:
			z[i] = 1 / (float64(n) * float64(g))
		case AggSeqMeanTokenSumNorm:
			z[i] = 1 / (float64(g) * float64(maxTokens))
		}
	}
	return z, nil
}

// Objective holds the settings of the per-token loss.
type Objective struct {
	EpsLow, EpsHigh float64 // the ratio's clip band [1-EpsLow, 1+EpsHigh]
	Beta            float64 // weight of the KL to the reference
}

// BatchLoss is the loss of a batch at the current parameters and the weight
// of every completion token's log-probability in its gradient.
type BatchLoss struct {
	Loss float64 // L = sum_i z_i sum_t l_{i,t}
	// Weights are the per-token loss weights for the training evaluation,
	// which minimises -sum w_t log pi_theta: w_t = -z_i * Grad_t, so that
	// its gradient is L's gradient at these parameters.
	Weights [][]float32
	// Tokens counts the unmasked completion tokens; ClipFrac and MeanKL
	// are over them.
	Tokens   int
	ClipFrac float64
	MeanKL   float64
}

// Loss evaluates the batch: adv[i] is completion i's advantage, cur[i] its
// tokens' current log-probabilities, old[i] the rollout's (nil: cur, the
// on-policy first update, rho = 1), ref[i] the reference's (needed when
// Beta > 0), z the sequence factors from SeqNorms, mask[i] (when mask and
// it are not nil) which of its tokens count.
func (o Objective) Loss(adv []float64, cur, old, ref [][]float32, z []float64, mask [][]bool) (BatchLoss, error) {
	var b BatchLoss
	b.Weights = make([][]float32, len(cur))
	clipped := 0
	var kl float64
	for i, lp := range cur {
		if old != nil && old[i] != nil && len(old[i]) != len(lp) {
			return b, fmt.Errorf("completion %d: %d old log-probs for %d tokens", i+1, len(old[i]), len(lp))
		}
		if o.Beta != 0 && (ref == nil || len(ref[i]) != len(lp)) {
			return b, fmt.Errorf("completion %d: no reference log-probs for its %d tokens (train.beta > 0)", i+1, len(lp))
		}
		w := make([]float32, len(lp))
		b.Weights[i] = w
		if z[i] == 0 {
			continue // masked: no loss, no gradient, no count
		}
		for t, c := range lp {
			if mask != nil && mask[i] != nil && !mask[i][t] {
				continue // out of the loss: weight 0, not counted
			}
			o_, r := float64(c), 0.0
			if old != nil && old[i] != nil {
				o_ = float64(old[i][t])
			}
			if o.Beta != 0 {
				r = float64(ref[i][t])
			}
			term := o.TokenLoss(adv[i], TokenLogProbs{Cur: float64(c), Old: o_, Ref: r})
			b.Loss += z[i] * term.Loss
			w[t] = float32(-z[i] * term.Grad)
			b.Tokens++
			if term.Clipped {
				clipped++
			}
			kl += term.KL
		}
	}
	if b.Tokens > 0 {
		b.ClipFrac = float64(clipped) / float64(b.Tokens)
		b.MeanKL = kl / float64(b.Tokens)
	}
	return b, nil
}

// Learning-rate schedules (train.schedule).
const (
	Constant = "constant"
	Linear   = "linear"
	Cosine   = "cosine"
)

// ScheduledLR is the learning rate of update k (1-based) out of total:
// a linear warm-up from lr/warmup to lr over the first warmup updates, then
// constant, or a linear or cosine decay that reaches 0 after update total
// (as transformers' get_linear/cosine_schedule_with_warmup, counted from 1
// so that the first update does not have a rate of 0). With total <= 0 the
// decays are constant.
func ScheduledLR(schedule string, lr float64, k, warmup, total int) (float64, error) {
	switch schedule {
	case Constant, Linear, Cosine, "":
	default:
		return 0, fmt.Errorf("unknown learning-rate schedule %q (want %s, %s or %s)", schedule, Constant, Linear, Cosine)
	}
	if k <= warmup && warmup > 0 {
		return lr * float64(k) / float64(warmup), nil
	}
	if total <= warmup {
		return lr, nil
	}
	progress := float64(k-warmup-1) / float64(total-warmup)
	progress = min(max(progress, 0), 1)
	switch schedule {
	case Constant, "":
		return lr, nil
	case Linear:
		return lr * (1 - progress), nil
	default:
		return lr * 0.5 * (1 + math.Cos(math.Pi*progress)), nil
	}
}
