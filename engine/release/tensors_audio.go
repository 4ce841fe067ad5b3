package release

import "fmt"

// AudioConvFreq is the number of mel-frequency rows left after the audio
// tower's three stride-2 convolutions (kernel 3, padding 1): each halves
// the rows, rounding up (128 mel bins -> 64 -> 32 -> 16).
func AudioConvFreq(melBins int) int {
	f := melBins
	for range 3 {
		f = (f + 1) / 2
	}
	return f
}

// AudioTensors is the audio tower's tensor table (spec §3.2): the
// checkpoint's thinker.audio_tower.* tensors in the spec's order, the
// convolution stack, the encoder layers, then the head. The sinusoidal
// position table is computed, not stored, so it has no row. The towers are
// kept under their checkpoint names (GGUF ""). Every 1-D tensor (LayerNorm
// weights and biases, linear and convolution biases) has RoleNorm, so it
// stays float32; the matrices and convolution kernels have RoleTower.
func AudioTensors(c Audio) []Tensor {
	d, ffn, ds := c.DModel, c.FFN, c.DownsampleHidden
	flat := ds * AudioConvFreq(c.MelBins) // conv_out input: channels x frequency rows
	var ts []Tensor
	add := func(layer int, key string, shape ...int) {
		name := AudioPrefix + key
		if layer >= 0 {
			name = fmt.Sprintf("%slayers.%d.%s", AudioPrefix, layer, key)
		}
		role := RoleTower
		if len(shape) == 1 {
			role = RoleNorm
		}
		ts = append(ts, Tensor{Name: name, Key: key, Layer: layer, Role: role, Shape: shape})
	}
	add(-1, "conv2d1.weight", ds, 1, 3, 3)  // [downsample, 1, 3, 3]
	add(-1, "conv2d1.bias", ds)             // [downsample]
	add(-1, "conv2d2.weight", ds, ds, 3, 3) // [downsample, downsample, 3, 3]
	add(-1, "conv2d2.bias", ds)             // [downsample]
	add(-1, "conv2d3.weight", ds, ds, 3, 3) // [downsample, downsample, 3, 3]
	add(-1, "conv2d3.bias", ds)             // [downsample]
	add(-1, "conv_out.weight", d, flat)     // [d_model, downsample*AudioConvFreq(mel_bins)], no bias
	for l := 0; l < c.Layers; l++ {
		add(l, "self_attn.q_proj.weight", d, d)   // [d_model, d_model]
		add(l, "self_attn.q_proj.bias", d)        // [d_model]
		add(l, "self_attn.k_proj.weight", d, d)   // [d_model, d_model]
		add(l, "self_attn.k_proj.bias", d)        // [d_model] (k has a bias here)
		add(l, "self_attn.v_proj.weight", d, d)   // [d_model, d_model]
		add(l, "self_attn.v_proj.bias", d)        // [d_model]
		add(l, "self_attn.out_proj.weight", d, d) // [d_model, d_model]
		add(l, "self_attn.out_proj.bias", d)      // [d_model]
		add(l, "self_attn_layer_norm.weight", d)  // [d_model]
		add(l, "self_attn_layer_norm.bias", d)    // [d_model]
		add(l, "fc1.weight", ffn, d)              // [ffn, d_model]
		add(l, "fc1.bias", ffn)                   // [ffn]
		add(l, "fc2.weight", d, ffn)              // [d_model, ffn]
		add(l, "fc2.bias", d)                     // [d_model]
		add(l, "final_layer_norm.weight", d)      // [d_model]
		add(l, "final_layer_norm.bias", d)        // [d_model]
	}
	add(-1, "ln_post.weight", d)            // [d_model]
	add(-1, "ln_post.bias", d)              // [d_model]
	add(-1, "proj1.weight", d, d)           // [d_model, d_model]
	add(-1, "proj1.bias", d)                // [d_model]
	add(-1, "proj2.weight", c.OutputDim, d) // [output_dim, d_model]
	add(-1, "proj2.bias", c.OutputDim)      // [output_dim]
	return ts
}
