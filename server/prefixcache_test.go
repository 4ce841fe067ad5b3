package server

import "testing"

type relVal struct{ released *int }

func (r relVal) Release() { *r.released++ }

func key(b byte) PrefixKey { var k PrefixKey; k[0] = b; return k }

func TestPrefixCacheLRUBoundedInBytes(t *testing.T) {
	released := 0
	const o = entryOverhead // what the cache holds per entry besides its value
	c := NewPrefixCache[any](3*(30+o) + 10)
	for i := byte(0); i < 4; i++ {
		if !c.Put(key(i), relVal{&released}, 30) {
			t.Fatalf("put %d refused", i)
		}
	}
	// 4 entries do not fit: the oldest (0) went out.
	st := c.Status()
	if st.Entries != 3 || st.Bytes != 3*(30+o) || st.Evictions != 1 || released != 1 {
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
	if c.Put(key(9), relVal{&released}, c.MaxBytes()+1) {
		t.Fatal("oversized value kept")
	}
	if released != before+1 {
		t.Fatal("oversized value not released")
	}
	// Replacing a key adjusts the byte count and releases the old value.
	c.Put(key(4), relVal{&released}, 10)
	if st := c.Status(); st.Bytes != 2*(30+o)+10+o || st.Entries != 3 {
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

// The budget bounds what the cache really holds: values and its own
// bookkeeping; Contains neither counts a lookup nor reorders.
func TestPrefixCacheCountsItsBookkeeping(t *testing.T) {
	c := NewPrefixCache[any](2*(100+entryOverhead) + 1)
	if c.MaxBytes() != 2*(100+entryOverhead)+1-entryOverhead {
		t.Fatalf("MaxBytes %d", c.MaxBytes())
	}
	c.Put(key(1), 1, 100)
	c.Put(key(2), 2, 100)
	if st := c.Status(); st.Bytes != 2*(100+entryOverhead) || st.Entries != 2 {
		t.Fatalf("two entries: %+v", st)
	}
	if !c.Contains(key(1)) || c.Contains(key(3)) {
		t.Fatal("Contains")
	}
	if st := c.Status(); st.Hits != 0 || st.Misses != 0 {
		t.Fatalf("Contains counted lookups: %+v", st)
	}
	c.Put(key(3), 3, 1) // 1 would fit the values alone; the bookkeeping does not
	if c.Contains(key(1)) || c.Status().Entries != 2 {
		t.Fatalf("past the budget with bookkeeping: %+v", c.Status())
	}
}
