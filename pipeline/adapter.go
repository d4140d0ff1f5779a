package pipeline

import (
	"errors"

	"github.com/confclip/confclip/train"
)

// PEFTSummary says what an adapter conversion wrote.
type PEFTSummary = train.PEFTSummary

// ExportPEFT converts the GGUF LoRA adapter (made for cfg's model) into a
// PEFT adapter folder dir: adapter_model.safetensors and
// adapter_config.json, for PEFT, transformers and vLLM's LoRA serving.
// baseModel is its base_model_name_or_path; "" takes it from the GGUF's
// metadata (train.BaseModelName).
func ExportPEFT(cfg ModelConfig, adapter, dir, baseModel string) (PEFTSummary, error) {
	if adapter == "" || dir == "" {
		return PEFTSummary{}, errors.New("adapter export: give the GGUF adapter and the PEFT folder to write")
	}
	cfg.Adapter = "" // loaded by the conversion itself
	m, err := OpenModel(cfg)
	if err != nil {
		return PEFTSummary{}, err
	}
	defer m.Close()
	return train.ExportPEFT(m.llm, adapter, dir, baseModel)
}

// ImportPEFT converts a PEFT LoRA adapter folder (trained on the Hugging
// Face model that cfg's GGUF was converted from) into llama.cpp's GGUF LoRA
// format at out, which every confclip command and llama.cpp's --lora load.
func ImportPEFT(cfg ModelConfig, dir, out string) (PEFTSummary, error) {
	if dir == "" || out == "" {
		return PEFTSummary{}, errors.New("adapter import: give the PEFT folder and the GGUF adapter to write")
	}
	cfg.Adapter = ""
	m, err := OpenModel(cfg)
	if err != nil {
		return PEFTSummary{}, err
	}
	defer m.Close()
	return train.ImportPEFT(m.llm, dir, out)
}
