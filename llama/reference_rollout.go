package llama

/*
#include <stdlib.h>
#include "llama.h"

// confclip_ref_batched_greedy is the plain C loop the rollout engine is
// measured against: the prompt decoded once, tagged with all the group's
// sequence ids, then one llama_decode per step with one token per live
// sequence, the next token the argmax of its logits row. A sequence ends on an
// end-of-generation token or after max_tokens tokens; the last token is not
// decoded. Returns the tokens generated, or a negative value on error.
static int confclip_ref_batched_greedy(struct llama_context * ctx, const llama_token * prompt, int n_prompt,
                                       int group, int max_tokens) {
	const struct llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));
	const int n_vocab = llama_vocab_n_tokens(vocab);
	const int n_batch = (int) llama_n_batch(ctx);
	llama_memory_clear(llama_get_memory(ctx), true);

	struct llama_batch batch = llama_batch_init(n_batch > group ? n_batch : group, 0, group);
	int * row = malloc(sizeof(int) * group);
	char * live = malloc(group);
	int ret = 0;

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
			int best = 0;
			for (int t = 1; t < n_vocab; t++) if (logits[t] > logits[best]) best = t;
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
	llama_batch_free(batch);
	return ret;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// ReferenceBatchedGreedy generates greedily for group sequences that share a
// prompt with a loop written in C straight on llama.cpp's API: the prompt
// decoded once for all sequences, then one decode per step with a token for
// each live sequence, argmax over the logits in C. It returns the tokens
// generated. The rollout benchmarks time the Go engine against it; it is not
// meant for use.
func ReferenceBatchedGreedy(ctx *Context, prompt []Token, group, maxTokens int) (tokens int, err error) {
	if len(prompt) == 0 || group < 1 || group > ctx.nseq || maxTokens < 1 {
		return 0, fmt.Errorf("llama: reference loop: %d prompt tokens, group %d (context allows %d), max tokens %d", len(prompt), group, ctx.nseq, maxTokens)
	}
	var n C.int
	var msg string
	if err := ctx.with(func(cc *C.struct_llama_context) {
		msg = call(func() {
			n = C.confclip_ref_batched_greedy(cc, (*C.llama_token)(unsafe.Pointer(&prompt[0])), C.int(len(prompt)), C.int(group), C.int(maxTokens))
		})
	}); err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("llama: %s", because(fmt.Sprintf("reference loop failed (%d)", int(n)), msg))
	}
	return int(n), nil
}
