package confclip

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// statedTag finds the confidence a completion states: RLCR's
// <confidence>q</confidence>, every occurrence (the last one counts).
var statedTag = regexp.MustCompile(`(?s)<confidence>(.*?)</confidence>`)

// decimal is a plain decimal number, as Python's float() reads one in
// RLCR's code (no hexadecimal, no "nan" or "inf", no underscores).
var decimal = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$`)

// StatedConfidence is the confidence q a completion states in its last
// <confidence>q</confidence> tag (RLCR's format, arXiv 2507.16806: a number
// from 0 to 1, spaces around it allowed). ok is false when there is no tag,
// the last one holds no number, or the number is outside [0, 1]: RLCR's
// format check fails for each of these.
func StatedConfidence(text string) (q float64, ok bool) {
	m := statedTag.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return 0, false
	}
	s := strings.TrimSpace(m[len(m)-1][1])
	if !decimal.MatchString(s) {
		return 0, false
	}
	q, err := strconv.ParseFloat(s, 64)
	if err != nil || q < 0 || q > 1 {
		return 0, false
	}
	return q, true
}

// RLCRMissing is RLCR's reward of a completion without a valid stated
// confidence: the authors' reward sums a format reward (1 when the tags
// are there and the confidence is in [0, 1]), the correctness (0 without
// the format) and 1 - Brier (0 without the format). With the format the sum
// is 2 + v - (q - v)^2, without it 0: shifted by -2, as RLCR below, -2.
const RLCRMissing = -2

// RLCR is the RLCR reward of a group (Damani et al., "Beyond Binary
// Rewards: Training LMs to Reason About Their Uncertainty", arXiv
// 2507.16806): correctness minus the Brier score of the stated confidence,
//
//	r_i = v_i - (q_i - v_i)^2,
//
// in [-1, 1], and RLCRMissing for a completion whose q_i is NaN (no valid
// stated confidence). v is the verifier's score, clamped to [0, 1] (1 or 0
// for the binary verifiers, as the paper's correctness).
func RLCR(r, v, q []float64) {
	for i := range r {
		if math.IsNaN(q[i]) {
			r[i] = RLCRMissing
			continue
		}
		vi := clamp(v[i], 0, 1)
		r[i] = vi - (q[i]-vi)*(q[i]-vi)
	}
}
