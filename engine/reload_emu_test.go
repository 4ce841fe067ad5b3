//go:build mslemu

package engine

import (
	"context"
	"testing"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/internal/mslemu"
)

// TestReloadEmulatedMetal is the daemon's idle unload and reload on the
// Metal backend over the emulated GPU (registered as metal-emu by
// emu_test.go): open the clef-tiny release, decide, Close, open again,
// decide: the same response bytes, and the same as the CPU backend's.
func TestReloadEmulatedMetal(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated GPU needs clang-19", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: emulates two whole decisions")
	}
	ctx := context.Background()
	c := readCases(t, "cases.jsonl")[0]
	req, err := api.ParseRequest(c.Request)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(backend string) string {
		t.Helper()
		e, err := Open(tinyDir+"/release", Options{Backend: backend, MaxLength: c.MaxLength})
		if err != nil {
			t.Fatal(err)
		}
		if e.Backend() != backend {
			t.Fatalf("engine runs on %q, want %q", e.Backend(), backend)
		}
		d, err := e.decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		got, _ := d.resp.MarshalJSON()
		return string(got)
	}
	first := decide(emuBackend)
	second := decide(emuBackend)
	if first != second {
		t.Errorf("response after the reload differs:\n%s\n%s", first, second)
	}
	if want := canonical(t, c.Response); first != want {
		t.Errorf("response\n got %s\nwant %s", first, want)
	}
}

// TestPrefixCacheEmulatedMetal: the prefix cache works on the Metal
// backend (its row chunking: Rows views and Concat on the device): two
// schemas about one state give the responses of an engine without the
// cache, the second from a hit, with the state spanning several row
// chunks.
func TestPrefixCacheEmulatedMetal(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated GPU needs clang-19", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: emulates several decisions")
	}
	ctx := context.Background()
	plain := open(t, "release", Options{Backend: emuBackend})
	store := newMapStore()
	cached := open(t, "release", Options{Backend: emuBackend, PrefixCache: store})
	plain.decoder.Chunk, cached.decoder.Chunk = 16, 16
	state := longState(4)
	for i, schema := range []int{0, 1} {
		req := prefixRequest(t, state, schema)
		want, err := plain.decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cached.decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		P := cached.prefixLen + got.enc.StateTokens
		if P <= 2*16 {
			t.Fatalf("prefix of %d tokens is not several chunks", P)
		}
		if hit := i > 0; got.stats.PrefixHit != hit || (hit && got.stats.CachedTokens != P) {
			t.Errorf("schema %d: hit %v cached %d, want hit %v of %d", schema, got.stats.PrefixHit, got.stats.CachedTokens, hit, P)
		}
		wb, _ := want.resp.MarshalJSON()
		gb, _ := got.resp.MarshalJSON()
		if string(wb) != string(gb) {
			t.Errorf("schema %d: response with the cache\n%s\nwithout\n%s", schema, gb, wb)
		}
	}
	if store.put != 1 || store.hits != 1 {
		t.Errorf("store saw %d puts, %d hits; want 1 and 1", store.put, store.hits)
	}
}
