// Package reference holds the loops the rollout is measured and checked
// against: a group's generation written in C straight on llama.cpp's API
// (the prompt decoded once, one decode per step, argmax or a softmax draw
// in C), on a llama.Context. The benchmarks time the Go engine against it
// and the tests compare its tokens; it is not meant for use.
package reference

/*
#cgo CFLAGS: -std=c11 -I${SRCDIR}/../../third_party/llama.cpp/llama/include -I${SRCDIR}/../../third_party/llama.cpp/ggml/include
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "llama.h"

// confclip_ref_next picks a sequence's next token from its logits row:
// with sampled == 0 the argmax; otherwise a draw from the full softmax at
// temperature 1 (the row's maximum, the exponentials into buf, a uniform
// draw from the sequence's own xorshift64* state, a scan of the cumulative
// sum), with the token's log-probability added to *sum_logprob, as a rollout
// records it.
static int confclip_ref_next(const float * logits, int n_vocab, int sampled, uint64_t * rng, float * buf, double * sum_logprob) {
	int best = 0;
	for (int t = 1; t < n_vocab; t++) if (logits[t] > logits[best]) best = t;
	if (!sampled) return best;
	const float mx = logits[best];
	float sum = 0;
	for (int t = 0; t < n_vocab; t++) sum += (buf[t] = expf(logits[t] - mx));
	uint64_t x = *rng;
	x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
	*rng = x;
	const float u = (float) ((double) ((x * 2685821657736338717ULL) >> 11) * 0x1.0p-53) * sum;
	float acc = 0;
	int tok = n_vocab - 1;
	for (int t = 0; t < n_vocab; t++) {
		acc += buf[t];
		if (acc > u) { tok = t; break; }
	}
	*sum_logprob += (double) (logits[tok] - mx) - log((double) sum);
	return tok;
}

// confclip_ref_batched is the plain C loop the rollout engine is measured
// against: the prompt decoded once, tagged with all the group's sequence
// ids, then one llama_decode per step with one token per live sequence, the
// next token the argmax of its logits row (sampled == 0) or drawn from its
// softmax with its log-probability computed (sampled != 0, seed the draws'
// seed). A sequence ends on an end-of-generation token or after max_tokens
// tokens; the last token is not decoded. Returns the tokens generated, or a
// negative value on error.
static int confclip_ref_batched(struct llama_context * ctx, const llama_token * prompt, int n_prompt,
                                int group, int max_tokens, int sampled, uint64_t seed, double * sum_logprob) {
	const struct llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));
	const int n_vocab = llama_vocab_n_tokens(vocab);
	const int n_batch = (int) llama_n_batch(ctx);
	llama_memory_clear(llama_get_memory(ctx), true);

	struct llama_batch batch = llama_batch_init(n_batch > group ? n_batch : group, 0, group);
	int * row = malloc(sizeof(int) * group);
	char * live = malloc(group);
	uint64_t * rng = malloc(sizeof(uint64_t) * group);
	float * buf = malloc(sizeof(float) * n_vocab);
	int ret = 0;
	for (int s = 0; s < group; s++) rng[s] = (seed + 1) * 0x9E3779B97F4A7C15ULL + (uint64_t) s * 0xBF58476D1CE4E5B9ULL + 1;

	for (int i = 0; i < n_prompt;) {
		batch.n_tokens = 0;
		for (; i < n_prompt && batch.n_tokens < n_batch; i++) {
			int k = batch.n_tokens++;
			batch.token[k] = prompt[i];
			batch.pos[k] = i;
			batch.n_seq_id[k] = group;
			for (int s = 0; s < group; s++) batch.seq_id[k][s] = s;
			batch.logits[k] = i == n_prompt - 1;
		}
		if (llama_decode(ctx, batch) != 0) { ret = -1; goto done; }
	}
	for (int s = 0; s < group; s++) { row[s] = batch.n_tokens - 1; live[s] = 1; }

	for (int step = 0, pos = n_prompt; step < max_tokens; step++, pos++) {
		int n = 0;
		for (int s = 0; s < group; s++) {
			if (!live[s]) continue;
			const float * logits = llama_get_logits_ith(ctx, row[s]);
			if (logits == NULL) { ret = -2; goto done; }
			const int best = confclip_ref_next(logits, n_vocab, sampled, &rng[s], buf, sum_logprob);
			ret++;
			if (llama_vocab_is_eog(vocab, best) || step == max_tokens - 1) { live[s] = 0; continue; }
			batch.token[n] = best;
			batch.pos[n] = pos;
			batch.n_seq_id[n] = 1;
			batch.seq_id[n][0] = s;
			batch.logits[n] = 1;
			row[s] = n++;
		}
		if (n == 0) break;
		batch.n_tokens = n;
		if (llama_decode(ctx, batch) != 0) { ret = -1; goto done; }
	}
done:
	free(row);
	free(live);
	free(rng);
	free(buf);
	llama_batch_free(batch);
	return ret;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/internal/handle"
)

// BatchedGreedy generates greedily for group sequences that share a
// prompt with a loop written in C straight on llama.cpp's API: the prompt
// decoded once for all sequences, then one decode per step with a token for
// each live sequence, argmax over the logits in C. It returns the tokens
// generated. The rollout benchmarks time the Go engine against it; it is not
// meant for use.
func BatchedGreedy(ctx *llama.Context, prompt []llama.Token, group, maxTokens int) (tokens int, err error) {
	tokens, _, err = batched(ctx, prompt, group, maxTokens, false, 0)
	return tokens, err
}

// BatchedSampled is BatchedGreedy with each token drawn
// from the full softmax at temperature 1 and its log-probability computed,
// the work a rollout does per token, in C: each sequence has its own
// xorshift generator seeded from seed. It returns the tokens generated and
// the sum of their log-probabilities.
func BatchedSampled(ctx *llama.Context, prompt []llama.Token, group, maxTokens int, seed uint64) (tokens int, sumLogprob float64, err error) {
	return batched(ctx, prompt, group, maxTokens, true, seed)
}

func batched(ctx *llama.Context, prompt []llama.Token, group, maxTokens int, sampled bool, seed uint64) (int, float64, error) {
	if len(prompt) == 0 || group < 1 || maxTokens < 1 {
		return 0, 0, fmt.Errorf("llama: reference loop: %d prompt tokens, group %d, max tokens %d", len(prompt), group, maxTokens)
	}
	var n C.int
	var lp C.double
	var msg string
	smp := C.int(0)
	if sampled {
		smp = 1
	}
	var nseq int
	if err := handle.Context(ctx, func(p unsafe.Pointer, seqs int) {
		if nseq = seqs; group > nseq {
			return
		}
		cc := (*C.struct_llama_context)(p)
		msg = handle.Call(func() {
			n = C.confclip_ref_batched(cc, (*C.llama_token)(unsafe.Pointer(&prompt[0])), C.int(len(prompt)), C.int(group), C.int(maxTokens),
				smp, C.uint64_t(seed), &lp)
		})
	}); err != nil {
		return 0, 0, err
	}
	if group > nseq {
		return 0, 0, fmt.Errorf("llama: reference loop: group %d, the context allows %d sequences", group, nseq)
	}
	if n < 0 {
		return 0, 0, fmt.Errorf("llama: %s", handle.Because(fmt.Sprintf("reference loop failed (%d)", int(n)), msg))
	}
	return int(n), float64(lp), nil
}
