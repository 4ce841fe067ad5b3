package convert

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/quant"
)

// streamFromDir runs a Stream over a release directory as clef pull
// --quantize does: a copy of its small files, the shards' headers up
// front, then each shard added from a copy deleted right after.
func streamFromDir(t *testing.T, src string, opts Options, order []string) (*Result, error) {
	t.Helper()
	small := t.TempDir()
	ents, _ := os.ReadDir(src)
	headers := map[string][]byte{}
	var shards []string
	for _, e := range ents {
		n := e.Name()
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(n, "model-") && strings.HasSuffix(n, ".safetensors") {
			hl, err := SafetensorsHeaderSize(b)
			if err != nil {
				t.Fatal(err)
			}
			headers[n] = b[8 : 8+hl]
			shards = append(shards, n)
			continue
		}
		os.WriteFile(filepath.Join(small, n), b, 0o644)
	}
	s, err := NewStream(small, headers, opts)
	if err != nil {
		return nil, err
	}
	if order == nil {
		order = shards
	}
	for _, n := range order {
		tmp := filepath.Join(t.TempDir(), n)
		b, _ := os.ReadFile(filepath.Join(src, n))
		os.WriteFile(tmp, b, 0o644)
		if err := s.Add(n, tmp); err != nil {
			s.Abort()
			return nil, err
		}
		os.Remove(tmp)
	}
	res, err := s.Finish(small)
	if err != nil {
		s.Abort()
	}
	return res, err
}

// TestStreamMatchesQuantize: converting shard by shard, in either order,
// writes the same bytes as Quantize over the whole directory.
func TestStreamMatchesQuantize(t *testing.T) {
	for _, tc := range []struct {
		ft     string
		towers quant.Type
		order  []string
	}{
		{"q4_k_m", 0, []string{"model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"}},
		{"q8_0", quant.Q8_0, nil},
	} {
		ft, _ := ParseFileType(tc.ft)
		want := filepath.Join(t.TempDir(), "tiny.gguf")
		if _, err := Quantize(tinyBF16, Options{Type: ft, Out: want, Threads: 2, Name: "tiny", TowerType: tc.towers}); err != nil {
			t.Fatal(err)
		}
		got := filepath.Join(t.TempDir(), "tiny.gguf")
		res, err := streamFromDir(t, tinyBF16, Options{Type: ft, Out: got, Threads: 2, Name: "tiny", TowerType: tc.towers}, tc.order)
		if err != nil {
			t.Fatalf("%s: %v", tc.ft, err)
		}
		for _, p := range [][2]string{{want, got}, {release.CompanionPath(want), release.CompanionPath(got)}} {
			a, _ := os.ReadFile(p[0])
			b, _ := os.ReadFile(p[1])
			if len(a) != len(b) || !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs from Quantize's output (%d vs %d bytes)", tc.ft, filepath.Base(p[1]), len(b), len(a))
			}
		}
		if st, _ := os.Stat(got); res.BackboneBytes != st.Size() {
			t.Errorf("BackboneBytes %d, file %d", res.BackboneBytes, st.Size())
		}
		if _, err := os.Stat(got + ".partial"); err == nil {
			t.Error(".partial left")
		}
	}
}

// TestStreamMissingShard: Finish refuses while a shard is missing, naming it.
func TestStreamMissingShard(t *testing.T) {
	ft, _ := ParseFileType("q8_0")
	out := filepath.Join(t.TempDir(), "x.gguf")
	_, err := streamFromDir(t, tinyBF16, Options{Type: ft, Out: out, Threads: 1}, []string{"model-00001-of-00002.safetensors"})
	if err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors not added") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(out + ".partial"); err == nil {
		t.Fatal(".partial left after Abort")
	}
}
