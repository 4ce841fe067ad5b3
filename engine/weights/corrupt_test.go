package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/clefrt/clef/quant"
)

// maxErrLen bounds any error a damaged file may cause: it names the file,
// the place and the values at fault, quoted and cut (internal/untrusted),
// never the damaged bytes themselves.
const maxErrLen = 512

// checkErr fails when err is longer than maxErrLen or holds a control
// byte or invalid UTF-8 (the path the test chose is left out of the count).
func checkErr(t *testing.T, what string, err error, path string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := strings.ReplaceAll(err.Error(), path, "PATH")
	if len(msg) > maxErrLen {
		t.Errorf("%s: error of %d bytes: %.200q", what, len(msg), msg)
	}
	if !utf8.ValidString(msg) {
		t.Errorf("%s: error is not UTF-8: %.200q", what, msg)
		return
	}
	for _, r := range msg {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			t.Errorf("%s: error holds control character %U: %.200q", what, r, msg)
			return
		}
	}
}

// rawGGUF is a hand-built GGUF header: what the writer would refuse to
// write (unknown value types, duplicate keys) is written here.
type rawGGUF struct{ bytes.Buffer }

func (g *rawGGUF) u32(v uint32) *rawGGUF { binary.Write(g, binary.LittleEndian, v); return g }
func (g *rawGGUF) u64(v uint64) *rawGGUF { binary.Write(g, binary.LittleEndian, v); return g }
func (g *rawGGUF) str(s string) *rawGGUF { g.u64(uint64(len(s))); g.WriteString(s); return g }
func newRawGGUF(tensors, kvs uint64) *rawGGUF {
	g := &rawGGUF{}
	return g.u32(ggufMagic).u32(3).u64(tensors).u64(kvs)
}

// Files damaged where a name, key or value is read: the error names the
// place, quoted and cut, whatever the damaged string holds.
func TestCorruptNamesBounded(t *testing.T) {
	huge := strings.Repeat("\x00", 30000) + "\x1b[2J" + strings.Repeat("k", 500)
	ggufs := map[string][]byte{}
	ggufs["key, unknown value type"] = newRawGGUF(0, 1).str(huge).u32(99).Bytes()
	ggufs["key, truncated value"] = newRawGGUF(0, 1).str(huge).u32(uint32(GGUFUint64)).Bytes()
	ggufs["key twice"] = newRawGGUF(0, 2).str(huge).u32(uint32(GGUFUint8)).Write1(1).str(huge).u32(uint32(GGUFUint8)).Write1(1).Bytes()
	ggufs["array of absurd length"] = newRawGGUF(0, 1).str(huge).u32(uint32(GGUFArray)).u32(uint32(GGUFUint32)).u64(1 << 60).Bytes()
	ggufs["tensor name, 9 dims"] = newRawGGUF(1, 0).str(huge).u32(9).Bytes()
	ggufs["tensor name, truncated dims"] = newRawGGUF(1, 0).str(huge).u32(2).u64(4).Bytes()
	ggufs["tensor twice"] = newRawGGUF(2, 0).str(huge).u32(1).u64(32).u32(uint32(quant.F32)).u64(0).
		str(huge).u32(1).u64(32).u32(uint32(quant.F32)).u64(0).Bytes()
	ggufs["tensor of unknown type"] = newRawGGUF(1, 0).str(huge).u32(1).u64(32).u32(77).u64(0).Bytes()
	ggufs["tensor past the end"] = newRawGGUF(1, 0).str(huge).u32(1).u64(32).u32(uint32(quant.F32)).u64(0).Bytes()
	ggufs["alignment of the wrong type"] = newRawGGUF(0, 1).str("general.alignment").u32(uint32(GGUFString)).str(huge).Bytes()
	var buf bytes.Buffer
	w, _ := NewGGUFWriter(&buf, []GGUFKV{{GGUFShapeKey + huge, []int64{3, 3}}}, []GGUFTensorInfo{{Name: huge, Type: quant.F32, Dims: []uint64{4}}})
	w.WriteTensor(huge, make([]byte, 16))
	w.Close()
	ggufs["shape metadata that does not fit"] = buf.Bytes()

	dir := t.TempDir()
	for name, b := range ggufs {
		p := filepath.Join(dir, "m.gguf")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Open(p, Options{})
		if err == nil {
			m.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		checkErr(t, name, err, p)
	}

	// Metadata read back with the wrong type names key and value, cut.
	buf.Reset()
	w, _ = NewGGUFWriter(&buf, []GGUFKV{{huge, huge}, {"tokens", []string{huge, huge, huge, huge, huge, huge}}, {"neg", int32(-1)}}, nil)
	w.Close()
	p := filepath.Join(dir, "kv.gguf")
	os.WriteFile(p, buf.Bytes(), 0o644)
	f, err := OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, key := range []string{huge, "tokens", "neg", "missing" + huge} {
		_, err1 := f.Uint(key)
		_, err2 := f.Float(key)
		_, err3 := f.String(key)
		for _, err := range []error{err1, err2, err3} {
			checkErr(t, "metadata "+strconv.Quote(key[:3]), err, p)
		}
	}

	sts := map[string][]byte{}
	ent := func(dt string, shape []int, b, e int) map[string]any {
		return map[string]any{"dtype": dt, "shape": shape, "data_offsets": []int{b, e}}
	}
	sts["unknown dtype"] = stFile(map[string]any{huge: ent(huge, []int{2}, 0, 8)}, make([]byte, 8))
	sts["bad dimension"] = stFile(map[string]any{huge: ent("F32", append(make([]int, 5000), -1), 0, 8)}, make([]byte, 8))
	sts["bad entry"] = stFile(map[string]any{huge: map[string]any{"dtype": 5}}, nil)
	sts["bad metadata"] = stFile(map[string]any{"__metadata__": map[string]any{huge: 1}}, nil)
	sts["overlap"] = stFile(map[string]any{huge: ent("F32", []int{2}, 0, 8), huge + "2": ent("F32", []int{2}, 4, 12)}, make([]byte, 12))
	sts["past the end"] = stFile(map[string]any{huge: ent("F32", []int{2}, 0, 8)}, make([]byte, 4))
	h, _ := json.Marshal(map[string]any{huge: ent("F32", []int{1}, 0, 4)})
	sts["key twice"] = stFileRaw(append(append(append([]byte(`{`), h[1:len(h)-1]...), ','), h[1:]...), make([]byte, 4))
	sts["bad json"] = stFileRaw([]byte(`{"`+huge+`":`+huge), nil)
	for name, b := range sts {
		p := filepath.Join(dir, "m.safetensors")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Open(p, Options{})
		if err == nil {
			m.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		checkErr(t, name, err, p)
	}
}

// stFileRaw is a safetensors file with the header given verbatim.
func stFileRaw(header, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	b.Write(data)
	return b.Bytes()
}

// Write1 appends one byte (a uint8 or bool value).
func (g *rawGGUF) Write1(v byte) *rawGGUF { g.WriteByte(v); return g }

// Random damage to valid files: every refusal is a bounded, printable
// error (FuzzGGUF and FuzzSafetensorsHeader check the same as they run).
func TestCorruptFilesBounded(t *testing.T) {
	seeds := map[string][]byte{"small.gguf": smallGGUF()}
	if b, err := os.ReadFile("../../testdata/qwen3moe/tiny64-q8_0.gguf"); err == nil && len(b) < 4<<20 {
		seeds["tiny.gguf"] = b
	}
	if b, err := os.ReadFile(tinyRelease + "/joint_head.safetensors"); err == nil {
		seeds["head.safetensors"] = b
	}
	rng := rand.New(rand.NewSource(17))
	for name, seed := range seeds {
		for i := 0; i < 400; i++ {
			b := append([]byte(nil), seed...)
			// Damage the header region, where names and values live.
			region := min(len(b), 4096)
			for k := rng.Intn(8) + 1; k > 0; k-- {
				switch rng.Intn(4) {
				case 0:
					b[rng.Intn(region)] = byte(rng.Intn(256))
				case 1:
					b[rng.Intn(region)] = 0
				case 2:
					b = b[:rng.Intn(len(b))+1]
					region = min(len(b), region)
				default:
					at := rng.Intn(region)
					b = append(b[:at:at], append(bytes.Repeat([]byte{byte(rng.Intn(32))}, rng.Intn(64)), b[at:]...)...)
				}
			}
			var err error
			if strings.HasSuffix(name, ".gguf") {
				var g *GGUFFile
				if g, err = parseGGUF(name, b); err == nil {
					err = newSet("gguf", name).addGGUF(g)
				}
			} else {
				_, _, err = parseSafetensors(name, b)
			}
			checkErr(t, name+" #"+strconv.Itoa(i), err, name)
		}
	}
}
