package engine

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/clefrt/clef/engine/api"
)

// mapStore is an unbounded PrefixStore that counts its calls.
type mapStore struct {
	mu        sync.Mutex
	m         map[[32]byte]*Prefix
	gets, put int
	hits      int
	bytes     int64
	disabled  bool
}

func newMapStore() *mapStore { return &mapStore{m: map[[32]byte]*Prefix{}} }

func (s *mapStore) Get(k [32]byte) (*Prefix, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	v, ok := s.m[k]
	if ok {
		s.hits++
	}
	return v, ok
}

func (s *mapStore) Put(k [32]byte, v *Prefix, size int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put++
	s.bytes += size
	s.m[k] = v
	return true
}

func (s *mapStore) Contains(k [32]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[k]
	return ok
}

func (s *mapStore) Enabled() bool   { return !s.disabled }
func (s *mapStore) MaxBytes() int64 { return 1 << 62 }

// disabledStore is a store whose Enabled method says no (as a zero-budget
// server cache does).
type disabledStore struct{ *mapStore }

func (disabledStore) Enabled() bool { return false }

// prefixRequest builds a request over state with one of two schemas.
func prefixRequest(t testing.TB, state string, schema int) *api.Request {
	t.Helper()
	var qs string
	switch schema {
	case 0:
		qs = `{"late":{"type":"noul","instructions":"Did the package arrive late?"},
		       "tone":{"type":"choice","instructions":"Tone of the text","criteria":{"calm":"calm","angry":"angry","sad":"sad"}}}`
	case 1:
		qs = `{"damage":{"type":"score","instructions":"How damaged was the box?","criteria":["intact","slightly dented","crushed"]},
		       "refund":{"type":"noul","instructions":"Should the customer get a refund?"}}`
	}
	raw := fmt.Sprintf(`{"model":"clef-omni","state":%q,"questions":%s}`, state, qs)
	req, err := api.ParseRequest([]byte(raw))
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return req
}

// longState is a state of many tokens.
func longState(words int) string {
	var b strings.Builder
	for i := range words {
		fmt.Fprintf(&b, "item %d arrived late and the box was crushed; ", i)
	}
	return b.String()
}

// relDiff is max|a-b| / max|b|.
func relDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range b {
		dd := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(dd) {
			return math.Inf(1)
		}
		d, m = max(d, dd), max(m, math.Abs(float64(b[i])))
	}
	return d / m
}

// TestPrefixCacheSameAnswers asks two schemas about the same states with
// and without the prefix cache: same response bytes and same hidden states
// (within 1e-6 relative), with a hit on the second schema, a miss on a new
// state, and prefixes longer than one row chunk (the default 512, and a
// small chunk so the prefix spans several).
func TestPrefixCacheSameAnswers(t *testing.T) {
	ctx := context.Background()
	plain := open(t, "release", Options{})
	store := newMapStore()
	cached := open(t, "release", Options{PrefixCache: store})
	for _, run := range []struct {
		name  string
		chunk int
		state string
	}{
		{"short", 0, "The package arrived two weeks late and the box was crushed."},
		{"long-default-chunk", 0, longState(60)},
		{"long-chunk-37", 37, longState(25)},
	} {
		t.Run(run.name, func(t *testing.T) {
			plain.decoder.Chunk, cached.decoder.Chunk = run.chunk, run.chunk
			for i, schema := range []int{0, 1, 0} {
				req := prefixRequest(t, run.state, schema)
				want, err := plain.decide(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := cached.decide(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				P := plain.prefixLen + got.enc.StateTokens
				limit := 512
				if run.chunk > 0 {
					limit = 2 * run.chunk
				}
				if run.name != "short" && P <= limit {
					t.Fatalf("prefix of %d tokens is not longer than one chunk", P)
				}
				if hit := i > 0; got.stats.PrefixHit != hit || (hit && got.stats.CachedTokens != P) || (!hit && got.stats.CachedTokens != 0) {
					t.Errorf("schema %d (call %d): hit %v cached %d, want hit %v of %d", schema, i, got.stats.PrefixHit, got.stats.CachedTokens, hit, P)
				}
				wb, _ := want.resp.MarshalJSON()
				gb, _ := got.resp.MarshalJSON()
				if string(wb) != string(gb) {
					t.Errorf("schema %d (call %d): response with the cache\n%s\nwithout\n%s", schema, i, gb, wb)
				}
				// The hidden states themselves, on a hit (the entry is stored now).
				full, err := plain.decoder.Hidden(ctx, want.enc.InputIDs, nil)
				if err != nil {
					t.Fatal(err)
				}
				st := &Stats{}
				pp, err := cached.Prepare(req)
				if err != nil {
					t.Fatal(err)
				}
				h, err := cached.thinker(ctx, pp, st, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !st.PrefixHit {
					t.Error("backbone after decide missed the cache")
				}
				if r := relDiff(h, full); r > 1e-6 {
					t.Errorf("schema %d: hidden states with the cache differ: rel %g", schema, r)
				}
				if i == 0 {
					t.Logf("%s: %d tokens, prefix %d, hidden rel diff %g", run.name, len(got.enc.InputIDs), P, relDiff(h, full))
				}
			}
		})
	}
	if store.put != 3 || store.hits == 0 {
		t.Errorf("store saw %d puts, %d hits; want 3 puts (one per state)", store.put, store.hits)
	}
}

// TestPrefixCacheGolden runs the golden text cases twice through an engine
// with a cache (a miss, then a hit): both responses are the reference's.
func TestPrefixCacheGolden(t *testing.T) {
	ctx := context.Background()
	for _, c := range readCases(t, "cases.jsonl") {
		if len(c.Media) > 0 {
			continue
		}
		e := open(t, "release", Options{MaxLength: c.MaxLength, PrefixCache: newMapStore()})
		want := canonical(t, c.Response)
		for pass := range 2 {
			req, err := api.ParseRequest(c.Request)
			if err != nil {
				t.Fatal(err)
			}
			d, err := e.decide(ctx, req)
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			if d.stats.PrefixHit != (pass == 1) {
				t.Errorf("%s pass %d: hit %v", c.Name, pass, d.stats.PrefixHit)
			}
			if got, _ := d.resp.MarshalJSON(); string(got) != want {
				t.Errorf("%s pass %d: response\n got %s\nwant %s", c.Name, pass, got, want)
			}
		}
	}
}

// TestPrefixCacheKeys: the key covers the model and every prefix token; a
// disabled store is not used; a foreign value is ignored.
func TestPrefixCacheKeys(t *testing.T) {
	ctx := context.Background()
	e := open(t, "release", Options{})
	k := e.prefixKey([]int{1, 2, 3}, nil)
	for _, ids := range [][]int{{1, 2}, {1, 2, 4}, {1, 2, 3, 0}, {3, 2, 1}} {
		if e.prefixKey(ids, nil) == k {
			t.Errorf("ids %v share the key of [1 2 3]", ids)
		}
	}
	bf := open(t, "release-bf16", Options{})
	if bf.prefixKey([]int{1, 2, 3}, nil) == k {
		t.Error("two models share a key")
	}

	ms := newMapStore()
	off := open(t, "release", Options{PrefixCache: disabledStore{ms}})
	if _, err := off.decide(ctx, prefixRequest(t, "a state", 0)); err != nil {
		t.Fatal(err)
	}
	if ms.gets != 0 || ms.put != 0 {
		t.Errorf("disabled store used: %d gets, %d puts", ms.gets, ms.put)
	}

	ms = newMapStore()
	e2 := open(t, "release", Options{PrefixCache: ms})
	req := prefixRequest(t, "a state", 0)
	want, err := e2.decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for key, p := range ms.m {
		ms.m[key] = &Prefix{Len: p.Len - 1, K: p.K, V: p.V, Hidden: p.Hidden}
	}
	got, err := e2.decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.stats.PrefixHit {
		t.Error("a cached prefix of the wrong length counted as a hit")
	}
	wb, _ := want.resp.MarshalJSON()
	gb, _ := got.resp.MarshalJSON()
	if string(wb) != string(gb) {
		t.Errorf("response after a wrong-length prefix differs")
	}
	for _, v := range ms.m {
		if v.Len != len(v.Hidden)/e2.DecoderConfig().Hidden {
			t.Error("the wrong-length prefix was not replaced")
		}
	}
}

// BenchmarkDecidePrefixCache decides a second schema about a long state:
// without a cache (nocache), with a cache that misses (miss: the full run
// plus storing the prefix) and with the state's prefix cached (hit).
func BenchmarkDecidePrefixCache(b *testing.B) {
	ctx := context.Background()
	state := longState(80)
	for _, mode := range []string{"nocache", "miss", "hit"} {
		b.Run(mode, func(b *testing.B) {
			hit := mode == "hit"
			store := newMapStore()
			opts := Options{}
			if mode != "nocache" {
				opts.PrefixCache = store
			}
			e := open(b, "release", opts)
			if _, err := e.decide(ctx, prefixRequest(b, state, 0)); err != nil {
				b.Fatal(err)
			}
			req := prefixRequest(b, state, 1)
			b.ResetTimer()
			for b.Loop() {
				if mode == "miss" {
					store.mu.Lock()
					clear(store.m)
					store.mu.Unlock()
				}
				d, err := e.decide(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if d.stats.PrefixHit != hit {
					b.Fatalf("hit %v", d.stats.PrefixHit)
				}
			}
			b.ReportMetric(float64(len(req.Questions)), "questions")
		})
	}
}

// smallStore is a store too small for any prefix.
type smallStore struct{ *mapStore }

func (smallStore) MaxBytes() int64 { return 1 }

func TestPrefixCacheTooLarge(t *testing.T) {
	ms := newMapStore()
	e := open(t, "release", Options{PrefixCache: smallStore{ms}})
	for range 2 {
		d, err := e.decide(context.Background(), prefixRequest(t, "a state", 0))
		if err != nil {
			t.Fatal(err)
		}
		if d.stats.PrefixHit {
			t.Error("hit in a store too small for the prefix")
		}
	}
	if ms.gets != 0 || ms.put != 0 {
		t.Errorf("store too small used: %d gets, %d puts", ms.gets, ms.put)
	}
}
