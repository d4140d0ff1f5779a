package confclip

// SelfCertainty is a completion's self-certainty (Zhao et al., "Learning to
// Reason without External Rewards", arXiv 2505.19590, Intuitor): the mean
// over its tokens of KL(U || p_i), the model's distribution at position i
// against the uniform one over the vocabulary V,
//
//	KL(U || p_i) = -log V - (1/V) Σ_j log p_ij,
//
// per token as the rollout records it (dataset.Rollout.SelfCertainties).
// The authors' code computes logsumexp(z) - mean(z) of the logits z, which
// is the same plus log V: a constant that a group's advantages do not see.
// 0 for an empty completion.
func SelfCertainty(kl []float64) float64 {
	if len(kl) == 0 {
		return 0
	}
	var s float64
	for _, k := range kl {
		s += k
	}
	return s / float64(len(kl))
}

// newSelfCertainty is reward.method self_certainty: r_i = the completion's
// self-certainty, with no verifier in it (Intuitor's reward).
func newSelfCertainty(RewardParams) (Reward, error) {
	return Reward{Name: "self_certainty", SelfCertainty: true, Group: func(r, _, sc []float64) { copy(r, sc) }}, nil
}
