package confclip

import (
	"math"
	"sort"
)

// clamp limits x to [lo, hi]; NaN becomes lo.
func clamp(x, lo, hi float64) float64 {
	if math.IsNaN(x) || x < lo {
		return lo
	}
	if x > hi {
		return hi
	}
	return x
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
