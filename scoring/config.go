package scoring

// ConfidenceConfig chooses the confidence estimator (METHOD.md "Confidence").
type ConfidenceConfig struct {
	Estimator string `toml:"estimator"` // geo_mean, arith_mean, min, neg_entropy
	Scope     string `toml:"scope"`     // completion, answer
	Vocab     int    `toml:"vocab"`     // vocabulary size V, needed by neg_entropy
}

// RewardConfig is the reward (METHOD.md "ConfClip reward").
type RewardConfig struct {
	Method        string  `toml:"method"`         // confclip, binary
	Weight        string  `toml:"weight"`         // absolute, relative
	Lo            float64 `toml:"lo"`             // lower clip (absolute)
	Hi            float64 `toml:"hi"`             // upper clip (absolute)
	Eps           float64 `toml:"eps"`            // band half-width (relative)
	Lambda        float64 `toml:"lambda"`         // penalty on wrong answers
	FormatWeight  float64 `toml:"format_weight"`  // weight of the format verifier's score
	FormatPattern string  `toml:"format_pattern"` // regular expression for the format score
	Overlong      bool    `toml:"overlong"`       // DAPO soft overlong punishment
	MaxLen        int     `toml:"max_len"`        // overlong: maximum length
	CacheLen      int     `toml:"cache_len"`      // overlong: soft band length
	// SelfCertaintyWeight adds this times the completion's self-certainty
	// to the reward (0 = off).
	SelfCertaintyWeight float64 `toml:"self_certainty_weight"`
}

// AdvantageConfig is the advantage estimator (METHOD.md "Advantages").
type AdvantageConfig struct {
	Estimator     string `toml:"estimator"`      // grpo, dr_grpo, rloo, none
	Scale         string `toml:"scale"`          // grpo's divisor: group, batch, none
	SkipZeroStd   bool   `toml:"skip_zero_std"`  // drop zero-std groups from the export
	MaskTruncated bool   `toml:"mask_truncated"` // A = 0 for length-stopped completions
	// StdFilterBeta, when > 0, drops from a run's training set the groups
	// whose rewards' std is below beta times a moving average of the
	// earlier steps' mean group std (RLPR's std filter); StdFilterEMA is
	// the average's weight on the past.
	StdFilterBeta float64 `toml:"std_filter_beta"`
	StdFilterEMA  float64 `toml:"std_filter_ema"`
}
