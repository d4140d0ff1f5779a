package sampler

import (
	"hash/fnv"
	"math/rand/v2"
)

// RNG is the random stream of one sequence. Its key depends only on the run's
// seed, the prompt id and the sample index within the group, never on batch
// composition or thread scheduling, so a completion is reproducible on its
// own. The state is a PCG-DXSM generator (math/rand/v2) and can be saved and
// restored with MarshalBinary and UnmarshalBinary, which the run loop uses to
// checkpoint sequences in flight.
//
// An RNG is not safe for concurrent use; each sequence owns one.
type RNG struct {
	pcg rand.PCG
}

// NewRNG returns the stream for sample index sample of the prompt promptID
// under the base seed. The prompt id is hashed with FNV-1a; seed, hash and
// sample are mixed with SplitMix64's finaliser into the two PCG seed words, so
// that neighbouring seeds, ids or sample indices give unrelated streams.
func NewRNG(seed uint64, promptID string, sample int) *RNG {
	h := fnv.New64a()
	h.Write([]byte(promptID))
	k1 := mix64(seed + mix64(h.Sum64()))
	k2 := mix64(k1 ^ mix64(uint64(sample)+golden))
	r := new(RNG)
	r.pcg.Seed(k1, k2)
	return r
}

// golden is 2^64 divided by the golden ratio, SplitMix64's increment.
const golden = 0x9e3779b97f4a7c15

// mix64 is SplitMix64's output function (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014): a bijection on uint64
// with good avalanche, used here to derive independent keys.
func mix64(z uint64) uint64 {
	z += golden
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Uint64 returns the next 64 random bits.
func (r *RNG) Uint64() uint64 { return r.pcg.Uint64() }

// Float64 returns a uniform number in [0, 1) with 53 random bits.
func (r *RNG) Float64() float64 { return float64(r.pcg.Uint64()>>11) * 0x1p-53 }

// MarshalBinary encodes the generator's state.
func (r *RNG) MarshalBinary() ([]byte, error) { return r.pcg.MarshalBinary() }

// UnmarshalBinary restores a state written by MarshalBinary; the stream goes
// on exactly where it was saved.
func (r *RNG) UnmarshalBinary(data []byte) error { return r.pcg.UnmarshalBinary(data) }
