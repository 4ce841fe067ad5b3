//go:build unix

package qwen3moe

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// benchConfig has the real Qwen3-Omni thinker layer shapes with 4 layers,
// the model of the llama-bench figures in testdata/qwen3moe/README.md.
var benchConfig = release.Text{Hidden: 2048, Layers: 4, Heads: 32, KVHeads: 4, HeadDim: 128, Experts: 128, TopK: 8,
	ExpertFFN: 768, Vocab: 151936, NormEps: 1e-6, RopeTheta: 1e6, MRoPESections: [3]int{24, 20, 20}, MRoPEInterleaved: true, NormTopK: true}

// memModel is a weights.Model over anonymous memory mappings, so that the
// synthetic weights sit outside the Go heap as a mapped file would.
type memModel struct {
	t     map[string]*weights.Tensor
	maps  [][]byte
	bytes int64
}

func (m *memModel) Tensor(name string) (*weights.Tensor, error) {
	if t, ok := m.t[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("memModel: no tensor %q", name)
}
func (m *memModel) Has(name string) bool { _, ok := m.t[name]; return ok }
func (m *memModel) Names() []string {
	var n []string
	for k := range m.t {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
func (m *memModel) Close() error {
	for _, b := range m.maps {
		syscall.Munmap(b)
	}
	m.maps, m.t = nil, nil
	return nil
}

// xorshift is a tiny fast generator for bulk random bytes.
type xorshift uint64

func (x *xorshift) next() uint64 {
	v := uint64(*x)
	v ^= v << 13
	v ^= v >> 7
	v ^= v << 17
	*x = xorshift(v)
	return v
}

// fill writes random but valid values of type typ (about 0.02 in size, like
// 1/sqrt(2048)) into data: random codes with small positive block scales.
func fill(data []byte, typ quant.Type, rng *xorshift) error {
	for i := 0; i+8 <= len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], rng.next())
	}
	f, err := quant.FormatOf(typ)
	if err != nil {
		return err
	}
	put := func(off int, v float32) {
		binary.LittleEndian.PutUint16(data[off:], quant.Float32ToFloat16(v))
	}
	switch typ {
	case quant.F32:
		for i := 0; i < len(data); i += 4 {
			binary.LittleEndian.PutUint32(data[i:], 0x3c000000|uint32(rng.next()&0x807fffff)) // ±[2^-7, 2^-6)
		}
	case quant.BF16, quant.F16:
		for i := 0; i < len(data); i += 2 {
			v := float32(int32(rng.next()&0xffff)-0x8000) / 0x8000 * 0.04
			if typ == quant.BF16 {
				binary.LittleEndian.PutUint16(data[i:], quant.Float32ToBF16(v))
			} else {
				put(i, v)
			}
		}
	case quant.Q8_0:
		for b := 0; b < len(data); b += f.BlockBytes {
			put(b, 3e-4)
			for j := 2; j < 34; j++ {
				if data[b+j] == 0x80 {
					data[b+j] = 0x81
				}
			}
		}
	case quant.Q4_K, quant.Q5_K:
		for b := 0; b < len(data); b += f.BlockBytes {
			put(b, 2e-4)
			put(b+2, 1e-4)
		}
	case quant.Q6_K:
		for b := 0; b < len(data); b += f.BlockBytes {
			put(b+208, 3e-5)
		}
	default:
		return fmt.Errorf("fill: no generator for %v", typ)
	}
	return nil
}

// synthModel builds the benchmark model from the decoder's tensor table in
// one of clef quantize's mixes: "Q8_0", "BF16", or "Q4_K_M" (Q4_K, with Q6_K
// for attn_v and ffn_down of the layers llama.cpp gives more bits: here
// layers 2 and 3). Norms and the router stay F32, as in llama.cpp's files;
// the experts are stacked as in a GGUF file.
func synthModel(tb testing.TB, mix string, c release.Text) *memModel {
	m := &memModel{t: map[string]*weights.Tensor{}}
	rng := xorshift(0x9e3779b97f4a7c15)
	ft, err := convert.ParseFileType(mix)
	if err != nil {
		tb.Fatal(err)
	}
	for _, row := range release.DecoderTensors(c) {
		if row.Role == release.RoleOutput {
			continue // not the decoder's
		}
		typ := convert.TensorType(ft, row.Role, row.Layer, c.Layers, c.Heads/c.KVHeads)
		shape := row.Shape
		rb, err := quant.RowBytes(typ, shape[len(shape)-1])
		if err != nil {
			tb.Fatal(err)
		}
		rows := 1
		for _, d := range shape[:len(shape)-1] {
			rows *= d
		}
		data, err := syscall.Mmap(-1, 0, rows*rb, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			tb.Fatal(err)
		}
		if err := fill(data, typ, &rng); err != nil {
			tb.Fatal(err)
		}
		if len(shape) == 1 && typ == quant.F32 {
			for i := 0; i < len(data); i += 4 {
				binary.LittleEndian.PutUint32(data[i:], 0x3f800000) // norm weights 1
			}
		}
		m.maps = append(m.maps, data)
		m.bytes += int64(len(data))
		m.t[row.GGUF] = &weights.Tensor{Name: row.GGUF, Type: typ, Shape: shape, Data: data}
	}
	return m
}

// peakRSS returns the process's peak resident set (VmHWM) in bytes, and
// resetPeakRSS restarts it (Linux; elsewhere both do nothing).
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuSeconds returns the user+system CPU time of the process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// BenchmarkPrefill measures prefill tokens/s of the 4-layer real-shape
// model for each weight mix, thread count and prompt length, and the peak
// resident memory next to the weight bytes. Select with -bench, e.g.
// -bench 'Prefill/Q4_K_M/threads=2/L=512'.
func BenchmarkPrefill(b *testing.B) {
	for _, mix := range []string{"Q4_K_M", "Q8_0", "BF16"} {
		b.Run(mix, func(b *testing.B) {
			runtime.GC()
			debug.FreeOSMemory()
			w := synthModel(b, mix, benchConfig)
			defer w.Close()
			for _, threads := range []int{1, 2} {
				be := cpu.New(backend.Options{Threads: threads})
				m, err := Load(w, benchConfig, be)
				if err != nil {
					b.Fatal(err)
				}
				for _, L := range []int{128, 512, 2048} {
					b.Run(fmt.Sprintf("threads=%d/L=%d", threads, L), func(b *testing.B) {
						ids := make([]int, L)
						for i := range ids {
							ids[i] = (i*7919 + 13) % benchConfig.Vocab
						}
						runtime.GC()
						resetPeakRSS()
						cpu0 := cpuSeconds()
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							if _, err := m.Hidden(context.Background(), ids, nil); err != nil {
								b.Fatal(err)
							}
						}
						b.StopTimer()
						tokens := float64(L) * float64(b.N)
						b.ReportMetric(tokens/b.Elapsed().Seconds(), "tok/s")
						// On a shared machine wall time depends on the load;
						// tokens per CPU-second does much less.
						b.ReportMetric(tokens/(cpuSeconds()-cpu0), "tok/cpu-s")
						b.ReportMetric(float64(peakRSS())/(1<<30), "peakRSS_GiB")
						b.ReportMetric(float64(w.bytes)/(1<<30), "weights_GiB")
					})
				}
			}
		})
	}
}
