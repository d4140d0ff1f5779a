package confclip

// AnswerProb is RLPR's probability reward before debiasing (Yu et al.,
// "RLPR: Extrapolating RLVR to General Domains without Verifiers", arXiv
// 2506.18254): the mean per-token probability of the reference answer's
// tokens, teacher-forced after the completion's reasoning,
//
//	p = (1/|y*|) Σ_i π(y*_i | x, z, y*_<i),
//
// from their log-probabilities (the authors' mean_exp_log_softmax: the mean
// of the probabilities, not their product). 0 when the answer has no token
// of its own.
func AnswerProb(logprobs []float64) float64 {
	if len(logprobs) == 0 {
		return 0
	}
	return ArithMean(logprobs)
}

// DebiasAnswerProb is RLPR's debiased reward: the probability of the
// reference answer after the reasoning, p, less its probability straight
// after the prompt, base, cut at 0 (the authors' threshold_0 shaping: a
// reasoning that makes the answer less likely than no reasoning at all
// earns nothing). In [0, 1].
func DebiasAnswerProb(p, base float64) float64 {
	return max(p-base, 0)
}

// newAnswerProb is reward.method answer_prob: r_i = the debiased answer
// probability (scoring computes it with the model, into the confidences'
// place).
func newAnswerProb(RewardParams) (Reward, error) {
	return Reward{Name: "answer_prob", AnswerProb: true, Group: func(r, _, p []float64) { copy(r, p) }}, nil
}
