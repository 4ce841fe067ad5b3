// Package convert turns a Clef-Omni checkpoint (release or MLX directory, or
// a qwen3moe/qwen3vlmoe GGUF) into clef's GGUF files, and describes models
// for clef inspect.
//
// # Files written by Quantize
//
// FILE.gguf, the backbone: the thinker's text decoder as llama.cpp's qwen3moe
// architecture, one GGUF tensor per row of the decoder's tensor table
// (release.DecoderTensors: token_embd, blk.N.attn_norm / attn_q / ... /
// ffn_gate_exps / ffn_up_exps / ffn_down_exps with the experts stacked,
// output_norm, output), its hyper-parameters under qwen3moe.*
// (release.Text.GGUFMetadata, plus qwen3moe.rope.dimension_sections and
// rope.mrope_interleaved for M-RoPE, which llama.cpp ignores) and
// the tokenizer under tokenizer.ggml.* (gpt2 / qwen2, written by
// tokenizer.GGUFMetadata and read back by tokenizer.FromGGUF), so it stands alone.
// clef.file_type names the mixture ("q4_k_m").
//
// FILE.head.gguf, the companion (architecture "clef_head"): every tensor the
// backbone does not hold, under its stored name: the joint head (torch
// names, never quantized), thinker.audio_tower.* and thinker.visual.*
// (source precision, or Q8_0 with Options.TowerType). Metadata:
// clef.backbone (the backbone's file name), clef.config, clef.head_config,
// clef.processor_config (the release's JSON files, verbatim), and
// clef.shape.<tensor> (int64 array) for each tensor whose rank GGUF cannot
// hold (0-d scalars, the 5-D patch embedding), stored flattened with its rows
// unchanged. release.Open(FILE.gguf) opens both (weights restores the shapes).
//
// # Types
//
// TensorType defines the _M mixtures in one place; Fallback gives the type a
// tensor gets when its rows do not fill the wanted type's blocks (reported in
// Result.Fallbacks). Norms and the router are always F32.
//
// # Streaming
//
// Quantize maps the source and converts one source matrix at a time, in
// chunks of rows (up to 4M values) quantized in parallel and written
// straight to the output: memory stays at a few chunks whatever the model's
// size. Files are written under a .partial name, read back, then renamed.
package convert
