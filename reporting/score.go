package reporting

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/scoring"
)

// ScoreTable prints a score summary for a reader: outcomes, the chosen
// reward beside the binary baseline (zero-std groups above all),
// calibration and what was skipped.
func ScoreTable(w io.Writer, s scoring.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scored %s in %s from %s", english.Count(s.Records, "record"), english.Count(s.Groups, "group"), s.In)
	if s.Out != "" {
		fmt.Fprintf(tw, " -> %s", s.Out)
	}
	fmt.Fprintf(tw, " (%.2fs)\n", s.Seconds)
	fmt.Fprintf(tw, "verifier %s, confidence %s over %s (%s), advantage %s\n",
		s.Verifier, s.ConfidenceEstimator, s.ConfidenceScope, english.Count(s.ScopeFallbacks, "fallback"), s.Advantage)
	o := s.Outcomes
	tokens := fmt.Sprintf("mean tokens right %.1f / wrong %.1f", o.MeanTokensRight, o.MeanTokensWrong)
	if o.MeanTokensRight == 0 && o.MeanTokensWrong == 0 {
		tokens = "mean tokens: none counted (text-only records)"
	}
	fmt.Fprintf(tw, "accuracy %.4f  pass@1 %.4f  pass@%d %.4f  %s\n\n", o.Accuracy, o.PassAt1, o.G, o.PassAtG, tokens)
	fmt.Fprintf(tw, "\tbinary baseline\t%s (chosen)\n", s.Reward.Method)
	pct := func(st confclip.RewardStats) string {
		return fmt.Sprintf("%d/%d (%.1f%%)", st.ZeroStdGroups, st.Groups, 100*st.ZeroStdFraction)
	}
	fmt.Fprintf(tw, "zero-std groups\t%s\t%s\n", pct(s.Binary), pct(s.Reward))
	fmt.Fprintf(tw, "reward mean\t%.4f\t%.4f\n", s.Binary.Mean, s.Reward.Mean)
	fmt.Fprintf(tw, "reward std\t%.4f\t%.4f\n", s.Binary.Std, s.Reward.Std)
	fmt.Fprintf(tw, "within-group std\t%.4f\t%.4f\n", s.Binary.GroupStdMean, s.Reward.GroupStdMean)
	if c := s.Calibration; c != nil {
		auroc := "undefined (one class)"
		if c.AUROCDefined {
			auroc = fmt.Sprintf("%.4f", c.AUROC)
		}
		fmt.Fprintf(tw, "\ncalibration over %d: ECE %.4f  Brier %.4f  AUROC %s\n", c.N, c.ECE, c.Brier, auroc)
	}
	if s.MaskedTruncated > 0 {
		fmt.Fprintf(tw, "advantages masked for truncation: %d\n", s.MaskedTruncated)
	}
	if k := s.Skipped; k.Records > 0 {
		fmt.Fprintf(tw, "\nskipped %s (%s of the wrong size):\n", english.Count(k.Records, "record"), english.Count(k.Groups, "group"))
		for _, r := range k.SortedReasons() {
			fmt.Fprintf(tw, "  %s\t%d\n", r, k.Reasons[r])
		}
		for _, e := range k.Examples {
			fmt.Fprintf(tw, "  %s\n", e)
		}
	}
	return tw.Flush()
}
