"""Reads a PEFT adapter that `confclip adapter export` wrote back with PEFT.

Run by train's TestRealModelsPEFTReadBack with the interpreter of the virtual
environment `make peft-venv` makes (build/peft-venv: Debian's python3-torch
under pinned transformers, peft and gguf). Two modes:

  peft_readback.py model --gguf DIR/F.gguf --peft DIR --tokens T.json
      loads the base model from the GGUF file with transformers' GGUF loader
      (dequantized to float32), the adapter onto it with
      PeftModel.from_pretrained, and prints, as JSON, each sequence's
      completion-token log-probs with the adapter ("adapter") and with it
      disabled ("base"). T.json is [{"prompt": [ids], "completion": [ids]}].

  peft_readback.py weights --peft DIR
      for an architecture transformers' GGUF loader does not load: reads the
      folder with LoraConfig.from_pretrained and load_peft_weights and prints
      the config's rank, alpha and target modules and each tensor's name and
      shape.
"""

import argparse
import json
import os
import sys


def model_mode(args):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf), torch_dtype=torch.float32
    )
    # A GGUF file without output.weight ties the output to the token
    # embedding (llama.cpp's rule); transformers 4.46's GGUF loader leaves
    # lm_head untied and random there instead.
    from gguf import GGUFReader

    names = {t.name for t in GGUFReader(args.gguf).tensors}
    if "output.weight" not in names:
        base.config.tie_word_embeddings = True
        base.lm_head.weight = base.model.embed_tokens.weight
    model = PeftModel.from_pretrained(base, args.peft)
    model.eval()
    seqs = json.load(open(args.tokens))

    def logprobs():
        out = []
        with torch.no_grad():
            for s in seqs:
                ids = torch.tensor([s["prompt"] + s["completion"]])
                lp = model(ids).logits.float().log_softmax(-1)[0]
                n = len(s["prompt"])
                out.append([lp[n - 1 + k, tok].item() for k, tok in enumerate(s["completion"])])
        return out

    res = {"adapter": logprobs()}
    with model.disable_adapter():
        res["base"] = logprobs()
    res["versions"] = versions()
    json.dump(res, sys.stdout)


def weights_mode(args):
    from peft import LoraConfig
    from peft.utils import load_peft_weights

    cfg = LoraConfig.from_pretrained(args.peft)
    w = load_peft_weights(args.peft, device="cpu")
    json.dump(
        {
            "r": cfg.r,
            "lora_alpha": cfg.lora_alpha,
            "target_modules": sorted(cfg.target_modules),
            "tensors": {k: list(v.shape) for k, v in w.items()},
            "versions": versions(),
        },
        sys.stdout,
    )


def versions():
    import peft
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("model")
    m.add_argument("--gguf", required=True)
    m.add_argument("--peft", required=True)
    m.add_argument("--tokens", required=True)
    w = sub.add_parser("weights")
    w.add_argument("--peft", required=True)
    args = p.parse_args()
    (model_mode if args.mode == "model" else weights_mode)(args)


if __name__ == "__main__":
    main()
