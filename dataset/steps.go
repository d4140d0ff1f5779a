package dataset

import "math/rand/v2"

// StepPrompts picks the prompts of a step of the run loop: the train
// prompts in an order shuffled once per pass (seeded by the seed and the
// pass), taken in turn. A step
// never holds a prompt twice: when a step crosses the end of a pass, a
// prompt that the next pass's order brings up again is deferred to the next
// step, in order. The draw is replayed from step 1, so a step's prompts
// depend only on the seed and the step number (resume relies on it); when
// the step size divides the prompts nothing is ever deferred.
func StepPrompts(ps []Prompt, n int, seed uint64, step int) []Prompt {
	if n <= 0 || n > len(ps) {
		n = len(ps)
	}
	pass, pos := 0, 0
	perm := passOrder(len(ps), seed, pass)
	var deferred, picked []int
	for s := 1; s <= step; s++ {
		queue := deferred
		deferred, picked = nil, picked[:0]
		in := make(map[int]bool, n)
		for len(picked) < n {
			var k int
			if len(queue) > 0 {
				k, queue = queue[0], queue[1:]
			} else {
				if pos == len(ps) {
					pass, pos = pass+1, 0
					perm = passOrder(len(ps), seed, pass)
				}
				k, pos = perm[pos], pos+1
			}
			if in[k] {
				deferred = append(deferred, k)
				continue
			}
			in[k] = true
			picked = append(picked, k)
		}
		deferred = append(queue, deferred...)
	}
	out := make([]Prompt, len(picked))
	for i, k := range picked {
		out[i] = ps[k]
	}
	return out
}

// passOrder is the shuffled order of one pass over n prompts.
func passOrder(n int, seed uint64, pass int) []int {
	return rand.New(rand.NewPCG(seed, uint64(pass)+0x9e3779b9)).Perm(n)
}
