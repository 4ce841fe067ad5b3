package server

import "testing"

type relVal struct{ released *int }

func (r relVal) Release() { *r.released++ }

func key(b byte) PrefixKey { var k PrefixKey; k[0] = b; return k }

func TestPrefixCacheLRUBoundedInBytes(t *testing.T) {
	released := 0
	c := NewPrefixCache[any](100)
	for i := byte(0); i < 4; i++ {
		if !c.Put(key(i), relVal{&released}, 30) {
			t.Fatalf("put %d refused", i)
		}
	}
	// 4×30 > 100: the oldest (0) went out.
	st := c.Status()
	if st.Entries != 3 || st.Bytes != 90 || st.Evictions != 1 || released != 1 {
		t.Fatalf("after 4 puts: %+v released=%d", st, released)
	}
	if _, ok := c.Get(key(0)); ok {
		t.Fatal("evicted entry still there")
	}
	// Touch 1, then add 4: 2 is now the least recently used and goes.
	if _, ok := c.Get(key(1)); !ok {
		t.Fatal("entry 1 missing")
	}
	c.Put(key(4), relVal{&released}, 30)
	if _, ok := c.Get(key(2)); ok {
		t.Fatal("LRU order not kept: 2 should have been evicted")
	}
	for _, k := range []byte{1, 3, 4} {
		if _, ok := c.Get(key(k)); !ok {
			t.Fatalf("entry %d missing", k)
		}
	}
	// Larger than the budget: refused and released.
	before := released
	if c.Put(key(9), relVal{&released}, 101) {
		t.Fatal("oversized value kept")
	}
	if released != before+1 {
		t.Fatal("oversized value not released")
	}
	// Replacing a key adjusts the byte count and releases the old value.
	c.Put(key(4), relVal{&released}, 10)
	if st := c.Status(); st.Bytes != 70 || st.Entries != 3 {
		t.Fatalf("after replace: %+v", st)
	}
	st = c.Status()
	if st.Hits != 4 || st.Misses != 2 {
		t.Fatalf("hits/misses %d/%d, want 4/2", st.Hits, st.Misses)
	}
	before = released
	c.Clear()
	if st := c.Status(); st.Entries != 0 || st.Bytes != 0 || released != before+3 {
		t.Fatalf("after clear: %+v released %d", st, released-before)
	}
}

func TestPrefixCacheDisabled(t *testing.T) {
	c := NewPrefixCache[any](0)
	if c.Enabled() || c.Put(key(1), 1, 1) {
		t.Fatal("zero-budget cache keeps entries")
	}
	var nilc *PrefixCache[any]
	if _, ok := nilc.Get(key(1)); ok || nilc.Put(key(1), 1, 0) || nilc.Enabled() {
		t.Fatal("nil cache misbehaves")
	}
}
