package release

import "fmt"

// VisionTensors is the vision tower's tensor table (spec §3.3): the
// checkpoint's thinker.visual.* tensors in the spec's order, the patch
// embedding and the learned position grid, the ViT blocks, the final
// merger, then the DeepStack mergers. The rotary table is computed, not
// stored, so it has no row. The towers are kept under their checkpoint
// names (GGUF "").
//
// Layer and Key: a row of blocks.B has Layer B and the Key after
// "thinker.visual.blocks.B." ("attn.qkv.weight"); a row of the DeepStack
// merger merger_list.K has Layer K and the Key after "thinker.visual."
// ("merger_list.K.ln_q.weight"), so its Key alone tells it from a block's;
// every other row has Layer -1 and the Key after "thinker.visual."
// ("patch_embed.proj.weight", "merger.mlp.0.weight").
//
// Roles: every 1-D tensor (LayerNorm weights and biases, linear and
// convolution biases) has RoleNorm, so it stays float32 as the audio
// tower's do; the matrices, the Conv3d kernel and the position table have
// RoleTower.
func VisionTensors(c Vision) []Tensor {
	h, ff, out := c.Hidden, c.Intermediate, c.OutHidden
	merged := h * c.SpatialMergeSize * c.SpatialMergeSize // a merge block's patches side by side
	var ts []Tensor
	add := func(layer int, prefix, key string, shape ...int) {
		role := RoleTower
		if len(shape) == 1 {
			role = RoleNorm
		}
		ts = append(ts, Tensor{Name: VisionPrefix + prefix + key, Key: key, Layer: layer, Role: role, Shape: shape})
	}
	add(-1, "", "patch_embed.proj.weight", h, c.InChannels, c.TemporalPatchSize, c.PatchSize, c.PatchSize) // [hidden, C, T, P, P] (Conv3d)
	add(-1, "", "patch_embed.proj.bias", h)                                                                // [hidden]
	add(-1, "", "pos_embed.weight", c.NumPositionEmbeddings, h)                                            // [side², hidden]
	ts[len(ts)-1].Role = RoleEmbed                                                                         // read by rows (GatherBlend): kept float
	for b := 0; b < c.Depth; b++ {
		p := fmt.Sprintf("blocks.%d.", b)
		add(b, p, "norm1.weight", h)              // [hidden]
		add(b, p, "norm1.bias", h)                // [hidden]
		add(b, p, "norm2.weight", h)              // [hidden]
		add(b, p, "norm2.bias", h)                // [hidden]
		add(b, p, "attn.qkv.weight", 3*h, h)      // [3·hidden, hidden]: q, k, v rows
		add(b, p, "attn.qkv.bias", 3*h)           // [3·hidden]
		add(b, p, "attn.proj.weight", h, h)       // [hidden, hidden]
		add(b, p, "attn.proj.bias", h)            // [hidden]
		add(b, p, "mlp.linear_fc1.weight", ff, h) // [intermediate, hidden]
		add(b, p, "mlp.linear_fc1.bias", ff)      // [intermediate]
		add(b, p, "mlp.linear_fc2.weight", h, ff) // [hidden, intermediate]
		add(b, p, "mlp.linear_fc2.bias", h)       // [hidden]
	}
	add(-1, "", "merger.ln_q.weight", h)               // [hidden] (LayerNorm before the shuffle)
	add(-1, "", "merger.ln_q.bias", h)                 // [hidden]
	add(-1, "", "merger.mlp.0.weight", merged, merged) // [hidden·merge², hidden·merge²]
	add(-1, "", "merger.mlp.0.bias", merged)           // [hidden·merge²]
	add(-1, "", "merger.mlp.2.weight", out, merged)    // [out_hidden, hidden·merge²]
	add(-1, "", "merger.mlp.2.bias", out)              // [out_hidden]
	for k := range c.DeepstackVisualIndexes {
		p := fmt.Sprintf("merger_list.%d.", k)
		add(k, "", p+"ln_q.weight", merged)          // [hidden·merge²] (LayerNorm after the shuffle)
		add(k, "", p+"ln_q.bias", merged)            // [hidden·merge²]
		add(k, "", p+"mlp.0.weight", merged, merged) // [hidden·merge², hidden·merge²]
		add(k, "", p+"mlp.0.bias", merged)           // [hidden·merge²]
		add(k, "", p+"mlp.2.weight", out, merged)    // [out_hidden, hidden·merge²]
		add(k, "", p+"mlp.2.bias", out)              // [out_hidden]
	}
	return ts
}
