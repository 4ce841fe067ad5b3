package media

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/clefrt/clef/internal/npy"
)

// auDir holds the audio goldens (copied from the shared media-decode set):
// each file and the reference's decode of it, float32 [N].
const auDir = "../../testdata/media-decode"

// auGolden reads a fixture's encoded bytes and the reference's decode.
func auGolden(t testing.TB, file string) (data []byte, want []float32) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(auDir, file))
	if err != nil {
		t.Fatal(err)
	}
	name := file[:len(file)-len(filepath.Ext(file))]
	a, err := npy.ReadFile(filepath.Join(auDir, name+".npy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Shape) != 1 || a.F == nil {
		t.Fatalf("%s.npy: shape %v, want float [N]", name, a.Shape)
	}
	return data, a.F
}

// auDiff is the largest and the mean absolute difference, and how many
// samples are bit for bit equal.
func auDiff(got, want []float32) (maxd, mean float64, equal int) {
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		maxd = max(maxd, d)
		mean += d
		if math.Float32bits(got[i]) == math.Float32bits(want[i]) {
			equal++
		}
	}
	return maxd, mean / float64(max(len(want), 1)), equal
}

// auChunk is one RIFF chunk.
func auChunk(id string, body []byte) []byte {
	b := append([]byte(id), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(body)))
	b = append(b, body...)
	if len(body)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

// auFmt is a fmt chunk body: WAVEFORMAT fields, plus for tag 0xFFFE the
// extensible part with the given channel mask and subformat tag.
func auFmt(tag, channels, rate, bits int, mask uint32, subTag int) []byte {
	width := (bits + 7) / 8
	b := make([]byte, 16)
	binary.LittleEndian.PutUint16(b[0:], uint16(tag))
	binary.LittleEndian.PutUint16(b[2:], uint16(channels))
	binary.LittleEndian.PutUint32(b[4:], uint32(rate))
	binary.LittleEndian.PutUint32(b[8:], uint32(rate*channels*width))
	binary.LittleEndian.PutUint16(b[12:], uint16(channels*width))
	binary.LittleEndian.PutUint16(b[14:], uint16(bits))
	if tag == waveExtensible {
		ext := make([]byte, 24)
		binary.LittleEndian.PutUint16(ext[0:], 22)
		binary.LittleEndian.PutUint16(ext[2:], uint16(bits))
		binary.LittleEndian.PutUint32(ext[4:], mask)
		binary.LittleEndian.PutUint32(ext[8:], uint32(subTag))
		copy(ext[12:], guidMediaSubtype[:])
		b = append(b, ext...)
	}
	return b
}

// auRIFF wraps chunks in a RIFF/WAVE header.
func auRIFF(chunks ...[]byte) []byte {
	var body []byte
	for _, c := range chunks {
		body = append(body, c...)
	}
	b := append([]byte("RIFF\x00\x00\x00\x00WAVE"), body...)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

// auWAV is a plain WAV file: fmt chunk, then data.
func auWAV(tag, channels, rate, bits int, data []byte) []byte {
	return auRIFF(auChunk("fmt ", auFmt(tag, channels, rate, bits, 0, 0)), auChunk("data", data))
}

// auS16 encodes 16-bit samples.
func auS16(v ...int16) []byte {
	b := make([]byte, 2*len(v))
	for i, s := range v {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
	}
	return b
}

// auTone is n frames of chans interleaved 16-bit channels, each a different
// voice-like mix of tones.
func auTone(n, chans, rate int) []int16 {
	v := make([]int16, n*chans)
	for i := range n {
		t := float64(i) / float64(rate)
		for c := range chans {
			f := 180 + 70*float64(c)
			x := 0.4*math.Sin(2*math.Pi*f*t) + 0.2*math.Sin(2*math.Pi*3.1*f*t+float64(c)) +
				0.1*math.Sin(2*math.Pi*5200*t)
			v[i*chans+c] = int16(math.Round(x * 32767 * 0.9))
		}
	}
	return v
}

// auNoPanic runs f and fails the test (with what) on a panic.
func auNoPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s: panic: %v", what, r)
		}
	}()
	f()
}

// auMutations calls f with prefixes and bit-flipped copies of data: every
// prefix up to 64 bytes and about 40 more spread over the rest, every bit
// of the first 32 bytes flipped, and 100 seeded flips elsewhere.
func auMutations(data []byte, f func(what string, b []byte)) {
	for n := 0; n < len(data); {
		f("prefix", data[:n])
		if n < 64 {
			n++
		} else {
			n += max(len(data)/40, 1)
		}
	}
	flip := func(bit int) {
		b := append([]byte(nil), data...)
		b[bit/8] ^= 1 << (bit % 8)
		f("bit flip", b)
	}
	for bit := range min(32, len(data)) * 8 {
		flip(bit)
	}
	seed := uint32(2463534242)
	for range 100 {
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		flip(int(seed % uint32(len(data)*8)))
	}
}
