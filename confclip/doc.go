// Package confclip is the method: confidence estimators, the ConfClip and
// binary rewards, group advantage estimators, and the group and calibration
// statistics that show what a reward does to a batch. Everything here is a
// pure function over []float64 (the shape of verl's core_algos.py): no I/O,
// no cgo, no model. Config names map onto functions through small registries
// (LookupConfidence, NewReward, LookupAdvantage).
//
// The formulas follow docs/method.md, which is this project's reading of
// "ConfClip: Confidence-Weighted and Clipped Reward for Reinforcement Learning
// in LLMs" (arXiv 2509.17730); the paper's equations were not available, so
// every choice is a config knob.
//
// Every function returns finite numbers for any input it documents: empty
// completions, -Inf or NaN log-probabilities, groups of one, equal rewards and
// very large groups.
package confclip
