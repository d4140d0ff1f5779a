package sampler_test

import (
	"fmt"

	"github.com/confclip/confclip/sampler"
)

func ExampleSampler_Sample() {
	s, err := sampler.New(sampler.Params{Temperature: 1, TopK: 2})
	if err != nil {
		panic(err)
	}
	// One random stream per completion: seed, prompt id, index in the group.
	rng := sampler.NewRNG(42, "gsm8k/0", 3)
	logits := []float32{1, 2, 3}
	c, err := s.Sample(logits, rng)
	if err != nil {
		panic(err)
	}
	// Token 0 was cut by top-k, so the sampling log-prob of the chosen token
	// is renormalised over tokens 1 and 2; the model log-prob is not.
	fmt.Printf("token %d: model %.4f, sampling %.4f, entropy %.4f\n", c.Token, c.LogProb, c.SamplingLogProb, c.Entropy)

	lp, h, _ := sampler.LogSoftmaxAt(logits, c.Token)
	fmt.Println(lp == c.LogProb, h == c.Entropy)
	// Output:
	// token 2: model -0.4076, sampling -0.3133, entropy 0.8324
	// true true
}
