package sampler

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchRow imitates an LLM's logits: a Gaussian floor over the vocabulary
// with standard deviation spread, and a few dozen plausible tokens at 10 to 14
// above it. With spread 1.5 the peaks hold most of the mass (a confident
// step); with spread 2.5 the floor does (a flat, high-entropy step, where the
// top-p nucleus runs to tens of thousands of tokens).
func benchRow(n int, spread float64) []float32 {
	r := rand.New(rand.NewPCG(5, 6))
	row := gaussianRow(n, spread, r)
	for range 32 {
		row[r.IntN(n)] = float32(10 + 4*r.Float64())
	}
	return row
}

// BenchmarkSample times one token on 32k and 150k vocabularies. Next to
// ns/token it reports ratio: the time of Sample over that of LogSoftmaxAt on
// the same row in the same run, i.e. what truncation and the draw cost on top
// of the full-vocabulary softmax pass that the log-probs need anyway.
func BenchmarkSample(b *testing.B) {
	for _, n := range []int{32_000, 151_936} {
		for _, shape := range []struct {
			name   string
			spread float64
		}{{"peaked", 1.5}, {"flat", 2.5}} {
			row := benchRow(n, shape.spread)
			for _, c := range []struct {
				name string
				p    Params
			}{
				{"temp1", Params{Temperature: 1}},
				{"top_p=0.95", Params{Temperature: 1, TopP: 0.95}},
				{"top_k=40", Params{Temperature: 1, TopK: 40}},
				{"chain", Params{Temperature: 0.7, TopK: 40, TopP: 0.95, MinP: 0.05}},
			} {
				b.Run(fmt.Sprintf("vocab=%d/%s/%s", n, shape.name, c.name), func(b *testing.B) {
					s := mustNew(b, c.p)
					rng := NewRNG(1, "bench", 0)
					s.Sample(row, rng)
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						if _, err := s.Sample(row, rng); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					perToken := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
					b.ReportMetric(perToken, "ns/token")

					start := time.Now()
					for range b.N {
						LogSoftmaxAt(row, 0)
					}
					base := float64(time.Since(start).Nanoseconds()) / float64(b.N)
					b.ReportMetric(perToken/base, "ratio")
				})
			}
		}
	}
}

// BenchmarkSampleTop times SampleTop with k alternatives against Sample on
// the same row in the same run: ratio is what recording top log-probs
// (serve's top_logprobs) costs per token on top of sampling.
func BenchmarkSampleTop(b *testing.B) {
	for _, n := range []int{32_000, 151_936} {
		row := benchRow(n, 2.5)
		for _, k := range []int{1, 5, 20} {
			b.Run(fmt.Sprintf("vocab=%d/k=%d", n, k), func(b *testing.B) {
				s := mustNew(b, Params{Temperature: 1, TopP: 0.95})
				rng := NewRNG(1, "bench", 0)
				top := make([]Alt, 0, k)
				s.SampleTop(row, rng, k, top)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, _, err := s.SampleTop(row, rng, k, top[:0]); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				perToken := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				b.ReportMetric(perToken, "ns/token")
				start := time.Now()
				for range b.N {
					s.Sample(row, rng)
				}
				base := float64(time.Since(start).Nanoseconds()) / float64(b.N)
				b.ReportMetric(perToken/base, "ratio")
			})
		}
	}
}
