package quant

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

const fixtureDir = "../testdata/quant"

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readF32(t testing.TB, name string) []float32 {
	b := readFile(t, name)
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func readF64(t testing.TB, name string) []float64 {
	b := readFile(t, name)
	out := make([]float64, len(b)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

type rowStats struct {
	RMSE     float64  `json:"rmse"`
	RMSEImat float64  `json:"rmse_imatrix_weighted"`
	RelRMSE  *float64 `json:"rel_rmse"`
}

type variant struct {
	Blocks string `json:"blocks"`
	Deq    string `json:"deq"`
	Stats  struct {
		RMSE     float64    `json:"rmse"`
		RMSEImat float64    `json:"rmse_imatrix_weighted"`
		Rows     []rowStats `json:"rows"`
	} `json:"stats"`
}

type typeEntry struct {
	Type       string              `json:"type"`
	ID         int                 `json:"ggml_type_id"`
	BlockSize  int                 `json:"block_size"`
	BlockBytes int                 `json:"bytes_per_block"`
	VecDotType string              `json:"vec_dot_type"`
	Variants   map[string]*variant `json:"variants"`
}

type index struct {
	Input struct {
		Rows     int      `json:"rows"`
		Cols     int      `json:"cols"`
		RowKinds []string `json:"row_kinds"`
	} `json:"input"`
	Types []typeEntry `json:"types"`
}

func loadIndex(t testing.TB) *index {
	var ix index
	if err := json.Unmarshal(readFile(t, "index.json"), &ix); err != nil {
		t.Fatal(err)
	}
	return &ix
}

// fixtureTypes returns the index entries of the types this package implements.
func fixtureTypes(t *testing.T) []typeEntry {
	var out []typeEntry
	for _, e := range loadIndex(t).Types {
		typ, err := ParseType(e.Type)
		if err != nil {
			continue // iq4_nl, iq4_xs: not implemented
		}
		if _, err := FormatOf(typ); err == nil {
			out = append(out, e)
		}
	}
	if len(out) < 12 {
		t.Fatalf("only %d fixture types found", len(out))
	}
	return out
}

func TestTableMatchesIndex(t *testing.T) {
	for _, e := range fixtureTypes(t) {
		typ, _ := ParseType(e.Type)
		f, _ := FormatOf(typ)
		if int(typ) != e.ID || f.Name != e.Type || f.BlockElems != e.BlockSize || f.BlockBytes != e.BlockBytes {
			t.Errorf("%s: table row %+v, index id %d block %d/%d", e.Type, *f, e.ID, e.BlockSize, e.BlockBytes)
		}
		if typ.String() != e.Type {
			t.Errorf("%v.String() = %q", typ, typ.String())
		}
		vt, err := ParseType(e.VecDotType)
		if err != nil || f.VecDotType != vt {
			t.Errorf("%s: VecDotType %v, want %s", e.Type, f.VecDotType, e.VecDotType)
		}
	}
}

func TestDequantizeBitExact(t *testing.T) {
	for _, e := range fixtureTypes(t) {
		typ, _ := ParseType(e.Type)
		for name, v := range e.Variants {
			blocks := readFile(t, v.Blocks)
			want := readF32(t, v.Deq)
			got := make([]float32, len(want))
			if err := Dequantize(typ, got, blocks); err != nil {
				t.Fatalf("%s/%s: %v", e.Type, name, err)
			}
			bad := 0
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					if bad < 3 {
						t.Errorf("%s/%s[%d]: got %g (%#08x), want %g (%#08x)", e.Type, name, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s/%s: %d of %d values differ", e.Type, name, bad, len(want))
			}
		}
	}
}
