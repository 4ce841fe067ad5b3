package qwen3moe

import (
	"testing"

	"github.com/clefrt/clef/engine/release"
)

// A prefix's memory lives while its keeper or a reader holds it: a
// reader that acquired it before the keeper released it (a cache evicting
// it) still reads it; once the last one released it, Acquire fails.
func TestPrefixMemoryReferences(t *testing.T) {
	m := &Model{Config: release.Text{Layers: 2, KVHeads: 1, HeadDim: 4, Hidden: 8}}
	p := m.newPrefix(10)
	if p.Len != 10 || len(p.K) != 2 || len(p.K[1]) != 40 || cap(p.V[1]) != 40 || len(p.Hidden) != 80 || cap(p.Hidden) != 80 {
		t.Fatalf("prefix shape: %d rows, %d layers, k1 %d, v1 cap %d, hidden %d/%d", p.Len, len(p.K), len(p.K[1]), cap(p.V[1]), len(p.Hidden), cap(p.Hidden))
	}
	if p.Bytes() != m.PrefixBytes(10) || p.Bytes() < int64(4*(2*2*40+80)) {
		t.Fatalf("Bytes %d, PrefixBytes %d", p.Bytes(), m.PrefixBytes(10))
	}
	p.Hidden[79] = 7
	if !p.Acquire() {
		t.Fatal("a held prefix cannot be acquired")
	}
	p.Release() // the keeper's reference
	if p.Hidden[79] != 7 {
		t.Fatal("the reader's prefix changed")
	}
	p.Release() // the reader's
	if p.Acquire() {
		t.Fatal("a released prefix was acquired")
	}
	lit := &Prefix{Len: 1, K: [][]float32{{1}}, V: [][]float32{{1}}, Hidden: []float32{1}}
	if !lit.Acquire() {
		t.Fatal("a literal prefix cannot be acquired")
	}
	lit.Release()
	lit.Release()
	if !lit.Acquire() || lit.Hidden[0] != 1 {
		t.Fatal("releasing a literal prefix changed it")
	}
}
