package shard

import (
	"fmt"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, c := range []struct {
		spec  string
		count int
		env   func(string) string
		want  Shard
		err   string
	}{
		{"", 0, env(), Shard{}, ""},
		{"2/7", 0, env(), Shard{2, 7}, ""},
		{"7/7", 0, env(), Shard{}, "0 <= K < N"},
		{"1-7", 0, env(), Shard{}, "want K/N"},
		{"1/7", 7, env(), Shard{}, "not both"},
		{"", 4, env(EnvJobCompletionIndex, "3"), Shard{3, 4}, ""},
		{"", 4, env(EnvSlurmTaskID, "4", EnvSlurmTaskMin, "1"), Shard{3, 4}, ""},
		{"", 4, env(EnvSlurmTaskID, "4"), Shard{}, "0 <= K < N"},
		{"", 4, env(), Shard{}, "neither"},
		{"env", 0, env(EnvSlurmTaskID, "2", EnvSlurmTaskCount, "5"), Shard{2, 5}, ""},
		{"env", 0, env(EnvSlurmTaskID, "2"), Shard{}, EnvSlurmTaskCount},
		{"", 3, env(EnvJobCompletionIndex, "x"), Shard{}, "not a whole number"},
	} {
		got, err := Resolve(c.spec, c.count, c.env)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Resolve(%q, %d): %v, want an error with %q", c.spec, c.count, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Resolve(%q, %d) = %v, %v; want %v", c.spec, c.count, got, err, c.want)
		}
	}
}

// TestOfIsStable: a prompt's shard depends on its id and N only, and
// the shards are roughly even.
func TestOfIsStable(t *testing.T) {
	count := make([]int, 7)
	for i := range 7000 {
		id := fmt.Sprintf("p%d", i)
		k := Of(id, 7)
		if k != Of(id, 7) {
			t.Fatal("Of is not a function of the id")
		}
		count[k]++
	}
	for k, n := range count {
		if n < 800 || n > 1200 {
			t.Fatalf("shard %d of 7 holds %d of 7000 ids: %v", k, n, count)
		}
	}
	// Known values: a change of hash would reshuffle users' running jobs.
	if a, b := Of("gsm8k-0", 8), Of("", 3); a != 6 || b != 2 {
		t.Fatalf("Of(gsm8k-0, 8) = %d, Of(\"\", 3) = %d: the hash changed", a, b)
	}
}
