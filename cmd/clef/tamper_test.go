package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/weights"
)

// A GGUF pair whose backbone metadata contradicts its tensors or its
// companion's config.json is refused by clef decide and clef inspect with
// the same error, naming the key and both values (issue 17, defect 8).
func TestDecideAndInspectRefuseTamperedGGUF(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gguf")
	if _, err := runClef(t, "quantize", "--model", tinyRelease, "--type", "q8_0", "--out", good, "--quiet"); err != nil {
		t.Fatal(err)
	}
	req := `{"model":"clef-omni","state":"s","questions":{"q":{"type":"noul","instructions":"ok?"}}}`
	if _, _, err := run(t, req, "decide", "--model", good); err != nil {
		t.Fatalf("untouched pair: %v", err)
	}
	for _, c := range []struct {
		key   string
		value any
		want  string
	}{
		{"qwen3moe.block_count", uint32(0), "qwen3moe.block_count = 0 is out of range"},
		{"qwen3moe.block_count", uint32(1000000), "qwen3moe.block_count is 1000000 but the tensors hold 2 layers"},
		{"qwen3moe.embedding_length", uint32(1 << 31), "qwen3moe.embedding_length = 2147483648 is out of range"},
		{"qwen3moe.attention.head_count", uint32(8), "qwen3moe.attention.head_count is 8 but blk.0.attn_q.weight has shape [64 64]"},
		{"qwen3moe.rope.freq_base", float32(10000), "qwen3moe.rope.freq_base is 10000 but config.json's rope_theta is 1e+06"},
	} {
		p := filepath.Join(dir, "m.gguf")
		err := weights.CopyGGUF(p, good, func(kv []weights.GGUFKV, ts []weights.GGUFTensorInfo) ([]weights.GGUFKV, []weights.GGUFTensorInfo) {
			for i := range kv {
				if kv[i].Key == c.key {
					kv[i].Value = c.value
				}
			}
			return kv, ts
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := weights.CopyGGUF(filepath.Join(dir, "m.head.gguf"), filepath.Join(dir, "good.head.gguf"), nil); err != nil {
			t.Fatal(err)
		}
		_, _, derr := run(t, req, "decide", "--model", p)
		_, ierr := runClef(t, "inspect", p)
		if derr == nil || ierr == nil || !strings.Contains(derr.Error(), c.want) || !strings.Contains(ierr.Error(), c.want) {
			t.Errorf("%s = %v:\n decide:  %v\n inspect: %v\nwant both saying %q", c.key, c.value, derr, ierr, c.want)
		}
	}
}
