package release

import (
	"fmt"
	"strconv"
	"strings"
)

// Role is what a tensor does, which decides its storage type in clef
// quantize (convert.TensorType) and how clef inspect groups it.
type Role int

// Tensor roles.
const (
	RoleNorm    Role = iota // norm weights (1-D)
	RoleRouter              // the MoE router: mlp.gate / ffn_gate_inp
	RoleEmbed               // an embedding table, read by rows (the token embedding, the vision position embedding)
	RoleOutput              // lm_head: output
	RoleAttnQ               // attention projections
	RoleAttnK               //
	RoleAttnV               //
	RoleAttnOut             //
	RoleFFNGate             // stacked expert projections
	RoleFFNUp               //
	RoleFFNDown             //
	RoleHead                // a joint head tensor: kept in float32, never quantized
	RoleTower               // a vision or audio tower tensor (kept, or q8_0 with clef quantize --towers)
)

var roleNames = [...]string{"norm", "router", "embed", "output", "attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down", "head", "tower"}

func (r Role) String() string {
	if r >= 0 && int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "role" + strconv.Itoa(int(r))
}

// Tensor is one row of an architecture's tensor table.
type Tensor struct {
	// Name is the checkpoint name. For stacked experts it holds "*" where
	// the release names each expert ("...mlp.experts.*.gate_proj.weight"):
	// the table row stands for all of them, one [E, out, in] tensor.
	Name string
	// GGUF is the llama.cpp name ("" for tensors kept under their
	// checkpoint name, in the companion file).
	GGUF string
	// Key names the tensor within its layer (Name after the layer prefix),
	// for the model code binding it.
	Key   string
	Layer int // layer index, -1 for tensors outside the layers
	Role  Role
	Shape []int // outermost first; stacked experts [E, out, in]
	// Optional tensors may be absent (the model then does without).
	Optional bool
}

// Stacked reports whether the row stands for the stacked experts of a layer.
func (t Tensor) Stacked() bool { return strings.Contains(t.Name, "*") }

// ExpertName is the checkpoint name of expert e of a stacked row.
func (t Tensor) ExpertName(e int) string { return strings.Replace(t.Name, "*", strconv.Itoa(e), 1) }

// DecoderPrefix is the checkpoint prefix of the text decoder in the release;
// LMHead is the output embedding the joint head's lexical prior reads.
const (
	DecoderPrefix = "thinker.model."
	LMHead        = "thinker.lm_head.weight"
)

// DecoderTensors is the text decoder's tensor table (spec: the Qwen3-MoE
// decoder of the thinker), in the order llama.cpp's converter writes:
// embedding, then per layer attention and MoE, then the final norm and the
// output embedding.
func DecoderTensors(c Text) []Tensor {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	ts := []Tensor{
		{Name: DecoderPrefix + "embed_tokens.weight", GGUF: "token_embd.weight", Key: "embed_tokens.weight", Layer: -1, Role: RoleEmbed, Shape: []int{c.Vocab, c.Hidden}},
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", DecoderPrefix, l)
		g := fmt.Sprintf("blk.%d.", l)
		for _, r := range []struct {
			key, gguf string
			role      Role
			shape     []int
		}{
			{"input_layernorm.weight", "attn_norm.weight", RoleNorm, []int{c.Hidden}},                                        // [hidden]
			{"self_attn.q_proj.weight", "attn_q.weight", RoleAttnQ, []int{q, c.Hidden}},                                      // [heads*head_dim, hidden]
			{"self_attn.k_proj.weight", "attn_k.weight", RoleAttnK, []int{kv, c.Hidden}},                                     // [kv_heads*head_dim, hidden]
			{"self_attn.v_proj.weight", "attn_v.weight", RoleAttnV, []int{kv, c.Hidden}},                                     // [kv_heads*head_dim, hidden]
			{"self_attn.o_proj.weight", "attn_output.weight", RoleAttnOut, []int{c.Hidden, q}},                               // [hidden, heads*head_dim]
			{"self_attn.q_norm.weight", "attn_q_norm.weight", RoleNorm, []int{c.HeadDim}},                                    // [head_dim]
			{"self_attn.k_norm.weight", "attn_k_norm.weight", RoleNorm, []int{c.HeadDim}},                                    // [head_dim]
			{"post_attention_layernorm.weight", "ffn_norm.weight", RoleNorm, []int{c.Hidden}},                                // [hidden]
			{"mlp.gate.weight", "ffn_gate_inp.weight", RoleRouter, []int{c.Experts, c.Hidden}},                               // [experts, hidden]
			{"mlp.experts.*.gate_proj.weight", "ffn_gate_exps.weight", RoleFFNGate, []int{c.Experts, c.ExpertFFN, c.Hidden}}, // [experts, expert_ffn, hidden]
			{"mlp.experts.*.up_proj.weight", "ffn_up_exps.weight", RoleFFNUp, []int{c.Experts, c.ExpertFFN, c.Hidden}},       // [experts, expert_ffn, hidden]
			{"mlp.experts.*.down_proj.weight", "ffn_down_exps.weight", RoleFFNDown, []int{c.Experts, c.Hidden, c.ExpertFFN}}, // [experts, hidden, expert_ffn]
		} {
			ts = append(ts, Tensor{Name: p + r.key, GGUF: g + r.gguf, Key: r.key, Layer: l, Role: r.role, Shape: r.shape})
		}
	}
	return append(ts,
		Tensor{Name: DecoderPrefix + "norm.weight", GGUF: "output_norm.weight", Key: "norm.weight", Layer: -1, Role: RoleNorm, Shape: []int{c.Hidden}},
		Tensor{Name: LMHead, GGUF: "output.weight", Key: "lm_head.weight", Layer: -1, Role: RoleOutput, Shape: []int{c.Vocab, c.Hidden}},
	)
}

// HeadTensors is the joint schema head's tensor table: the torch
// state_dict names of joint_head.safetensors, in the reference module's
// order. Head tensors keep their names in every container.
func HeadTensors(c Head) []Tensor {
	hs, w, ff := c.HiddenSize, c.Width, c.Feedforward
	var ts []Tensor
	add := func(layer int, name string, shape ...int) {
		key := name
		if layer >= 0 {
			_, key, _ = strings.Cut(strings.SplitN(name, ".", 2)[1], ".")
		}
		ts = append(ts, Tensor{Name: name, Key: key, Layer: layer, Role: RoleHead, Shape: shape})
	}
	norm := func(layer int, p string, n int) {
		add(layer, p+".weight", n) // [n]
		add(layer, p+".bias", n)   // [n]
	}
	lin := func(layer int, p string, out, in int, bias bool) {
		add(layer, p+".weight", out, in) // [out, in]
		if bias {
			add(layer, p+".bias", out) // [out]
		}
	}
	attn := func(layer int, p string) {
		add(layer, p+".in_proj_weight", 3*w, w) // [3·width, width]: q, k, v rows
		add(layer, p+".in_proj_bias", 3*w)      // [3·width]
		lin(layer, p+".out_proj", w, w, true)   // [width, width], [width]
	}
	norm(-1, "hidden_norm", hs)                         // [hidden]
	lin(-1, "memory_projection", w, hs, false)          // [width, hidden]
	lin(-1, "question_projection", w, hs, false)        // [width, hidden]
	lin(-1, "option_question_projection", w, hs, false) // [width, hidden]
	lin(-1, "global_projection", w, hs, false)          // [width, hidden]
	lin(-1, "option_context_projection", w, hs, false)  // [width, hidden]
	lin(-1, "option_lexical_projection", w, hs, false)  // [width, hidden]
	add(-1, "type_embedding.weight", 3, w)              // [3, width]
	for i := 0; i < c.RoutingLayers; i++ {
		p := fmt.Sprintf("evidence_layers.%d.", i)
		norm(i, p+"query_norm", w)             // [width]
		norm(i, p+"memory_norm", w)            // [width]
		attn(i, p+"attention")                 // cross-attention of the options to the memory
		norm(i, p+"feedforward_norm", w)       // [width]
		lin(i, p+"feedforward.0", ff, w, true) // [feedforward, width]
		lin(i, p+"feedforward.3", w, ff, true) // [width, feedforward]
	}
	norm(-1, "option_summary_norm", w) // [width]
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("layers.%d.", i)
		attn(i, p+"self_attn")           // self-attention of the fields
		attn(i, p+"multihead_attn")      // cross-attention of the fields to the memory
		lin(i, p+"linear1", ff, w, true) // [feedforward, width]
		lin(i, p+"linear2", w, ff, true) // [width, feedforward]
		norm(i, p+"norm1", w)            // [width]
		norm(i, p+"norm2", w)            // [width]
		norm(i, p+"norm3", w)            // [width]
	}
	norm(-1, "field_norm", w)                  // [width]
	norm(-1, "option_norm", w)                 // [width]
	lin(-1, "residual_scorer.0", w, 4*w, true) // [width, 4·width]
	lin(-1, "residual_scorer.3", 1, w, true)   // [1, width]
	add(-1, "prior_logit_scale")               // []
	add(-1, "joint_logit_scale")               // []
	add(-1, "residual_gate")                   // []
	return ts
}
