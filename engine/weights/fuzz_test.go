package weights

import (
	"bytes"
	"os"
	"testing"
	"unsafe"

	"github.com/clefrt/clef/quant"
)

// checkTensor dequantizes a small parsed tensor: whatever a damaged header
// claims, reading an accepted tensor must not panic.
func checkTensor(t *testing.T, ten *Tensor, buf []byte) {
	if len(ten.Data) > 0 {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
		p := uintptr(unsafe.Pointer(&ten.Data[0]))
		if p < lo || p+uintptr(len(ten.Data)) > lo+uintptr(len(buf)) {
			t.Fatalf("tensor %q data does not alias the file", ten.Name)
		}
	}
	if ten.Elements() <= 1<<14 {
		if _, err := Float32(ten); err != nil && ten.Type != quant.U64 {
			_ = err // unsupported dequantization is an error, never a panic
		}
	}
}

func FuzzSafetensorsHeader(f *testing.F) {
	for _, p := range []string{tinyRelease + "/joint_head.safetensors", tinyBF16 + "/joint_head.safetensors"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add(stFile(map[string]any{"a": map[string]any{"dtype": "BF16", "shape": []int{2, 2}, "data_offsets": []int{0, 8}}, "__metadata__": map[string]string{"k": "v"}}, make([]byte, 8)))
	f.Add(stFile(map[string]any{"s": map[string]any{"dtype": "F32", "shape": []int{}, "data_offsets": []int{0, 4}}}, make([]byte, 4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, _, err := parseSafetensors("fuzz.safetensors", b)
		if err != nil {
			checkErr(t, "refusal", err, "fuzz.safetensors")
			return
		}
		for _, ten := range ts {
			n, err := byteSize(ten.Type, ten.Shape)
			if err != nil || n != int64(len(ten.Data)) {
				t.Fatalf("accepted tensor %q with %d bytes for %v %v", ten.Name, len(ten.Data), ten.Type, ten.Shape)
			}
			checkTensor(t, ten, b)
		}
	})
}

// smallGGUF writes a GGUF holding every metadata type and a few tensor types.
func smallGGUF() []byte {
	var buf bytes.Buffer
	kv := []GGUFKV{
		{"general.architecture", "qwen3moe"}, {"u8", uint8(1)}, {"i8", int8(-1)}, {"u16", uint16(2)}, {"i16", int16(-2)},
		{"u32", uint32(3)}, {"i32", int32(-3)}, {"f32", float32(1.5)}, {"b", true}, {"u64", uint64(4)}, {"i64", int64(-4)},
		{"f64", 2.5}, {"as", []string{"a", "bc"}}, {"ai", []int32{1, 2}}, {"af", []float32{1}}, {"ab", []bool{true}},
	}
	infos := []GGUFTensorInfo{
		{Name: "token_embd.weight", Type: quant.F16, Dims: []uint64{4, 2}},
		{Name: "blk.0.ffn_up_exps.weight", Type: quant.Q8_0, Dims: []uint64{32, 1, 2}},
		{Name: "blk.0.attn_q.weight", Type: quant.Q4_K, Dims: []uint64{256, 1}},
	}
	w, _ := NewGGUFWriter(&buf, kv, infos)
	w.WriteTensor("token_embd.weight", bytes.Repeat([]byte{0x3c, 0x00}, 8))
	w.WriteTensor("blk.0.ffn_up_exps.weight", bytes.Repeat([]byte{1}, 68))
	w.WriteTensor("blk.0.attn_q.weight", bytes.Repeat([]byte{7}, 144))
	w.Close()
	return buf.Bytes()
}

func FuzzGGUF(f *testing.F) {
	if b, err := os.ReadFile("../../testdata/qwen3moe/tiny64-q8_0.gguf"); err == nil {
		f.Add(b)
	}
	f.Add(smallGGUF())
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := parseGGUF("fuzz.gguf", b)
		if err != nil {
			checkErr(t, "refusal", err, "fuzz.gguf")
			return
		}
		// An accepted file rewrites and re-reads to the same description.
		var buf bytes.Buffer
		w, err := NewGGUFWriter(&buf, g.KV, g.Tensors)
		if err != nil {
			return // e.g. a value type the writer refuses
		}
		for _, ti := range g.Tensors {
			if err := w.WriteTensor(ti.Name, ti.Data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		h, err := parseGGUF("rewritten.gguf", buf.Bytes())
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if len(h.Tensors) != len(g.Tensors) || len(h.KV) != len(g.KV) {
			t.Fatal("rewritten file differs")
		}
		for i := range h.Tensors {
			if !bytes.Equal(h.Tensors[i].Data, g.Tensors[i].Data) || h.Tensors[i].Name != g.Tensors[i].Name {
				t.Fatalf("tensor %d differs after rewrite", i)
			}
		}
		s := newSet("gguf", "fuzz.gguf")
		if err := s.addGGUF(g); err != nil {
			checkErr(t, "refusal", err, "fuzz.gguf")
			return
		}
		for _, n := range s.Names() {
			checkTensor(t, s.tensors[n], b)
		}
	})
}
