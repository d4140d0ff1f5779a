package confclip

import "math"

// RewardStats describe a batch of groups under one reward.
type RewardStats struct {
	Method      string  `json:"method"`
	Groups      int     `json:"groups"`
	Completions int     `json:"completions"`
	Mean        float64 `json:"mean"` // over completions
	Std         float64 `json:"std"`  // over completions, n-1 divisor
	// GroupStdMean is the mean within-group std, the spread the group
	// advantages see.
	GroupStdMean float64 `json:"group_std_mean"`
	// ZeroStdGroups counts the groups whose rewards are all equal: their
	// advantages vanish (the vanishing-gradient measure ConfClip lowers).
	ZeroStdGroups   int     `json:"zero_std_groups"`
	ZeroStdFraction float64 `json:"zero_std_fraction"`
}

// RewardStatsOf summarises the rewards of a batch, one slice per group.
func RewardStatsOf(method string, groups [][]float64) RewardStats {
	st := RewardStats{Method: method, Groups: len(groups)}
	var sum, stdSum float64
	for _, g := range groups {
		st.Completions += len(g)
		for _, r := range g {
			sum += r
		}
		_, std := MeanStd(g)
		stdSum += std
		if std == 0 {
			st.ZeroStdGroups++
		}
	}
	if st.Completions > 0 {
		st.Mean = sum / float64(st.Completions)
	}
	if st.Groups > 0 {
		st.GroupStdMean = stdSum / float64(st.Groups)
		st.ZeroStdFraction = float64(st.ZeroStdGroups) / float64(st.Groups)
	}
	if st.Completions > 1 {
		var ss float64
		for _, g := range groups {
			for _, r := range g {
				ss += (r - st.Mean) * (r - st.Mean)
			}
		}
		st.Std = math.Sqrt(ss / float64(st.Completions-1))
	}
	return st
}

// OutcomeStats describe how often a batch's completions were right.
type OutcomeStats struct {
	Groups      int `json:"groups"`
	Completions int `json:"completions"`
	// G is the group size when all groups have the same size, else 0.
	G        int     `json:"group_size"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"` // correct / completions
	// PassAt1 is the mean over groups of the fraction right (the unbiased
	// pass@1 estimate); PassAtG is the fraction of groups with at least one
	// right completion.
	PassAt1 float64 `json:"pass_at_1"`
	PassAtG float64 `json:"pass_at_g"`
	// MeanTokensRight and MeanTokensWrong are the mean completion lengths in
	// tokens of right and wrong completions whose length is known.
	MeanTokensRight float64 `json:"mean_tokens_right"`
	MeanTokensWrong float64 `json:"mean_tokens_wrong"`
}

// OutcomeStatsOf summarises correctness, one slice per group; lengths has
// the same shape (tokens per completion, negative when unknown) or is nil.
func OutcomeStatsOf(correct [][]bool, lengths [][]int) OutcomeStats {
	st := OutcomeStats{Groups: len(correct)}
	var tokRight, tokWrong, nRight, nWrong int
	for gi, g := range correct {
		if gi == 0 {
			st.G = len(g)
		} else if len(g) != st.G {
			st.G = 0
		}
		c := 0
		for i, ok := range g {
			if ok {
				c++
			}
			if lengths == nil || lengths[gi][i] < 0 {
				continue
			}
			if ok {
				tokRight += lengths[gi][i]
				nRight++
			} else {
				tokWrong += lengths[gi][i]
				nWrong++
			}
		}
		st.Completions += len(g)
		st.Correct += c
		if len(g) > 0 {
			st.PassAt1 += PassAtK(len(g), c, 1)
			st.PassAtG += PassAtK(len(g), c, len(g))
		}
	}
	st.Accuracy = ratio(st.Correct, st.Completions)
	st.PassAt1 = safeDiv(st.PassAt1, float64(st.Groups))
	st.PassAtG = safeDiv(st.PassAtG, float64(st.Groups))
	st.MeanTokensRight = ratio(tokRight, nRight)
	st.MeanTokensWrong = ratio(tokWrong, nWrong)
	return st
}

// PassAtK is the unbiased pass@k estimate from n samples of which c are
// right (Chen et al. 2021, arXiv 2107.03374),
//
//	pass@k = 1 - C(n-c, k) / C(n, k) = 1 - Π_{i=n-c+1}^{n} (1 - k/i),
//
// the probability that k samples drawn without replacement hold a right one.
func PassAtK(n, c, k int) float64 {
	if n <= 0 || k <= 0 || c <= 0 {
		return 0
	}
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

func ratio(a, b int) float64 { return safeDiv(float64(a), float64(b)) }

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
