package server

import (
	"container/list"
	"sync"

	"github.com/clefrt/clef/server/status"
)

// PrefixKey names a cached prefix: a content hash of everything a record
// holds before its schema (model identity, system prompt, media, state).
type PrefixKey = [32]byte

// Releaser is implemented by cached values that hold memory outside the Go
// heap (device buffers): Release is called once when the entry leaves the cache.
type Releaser interface{ Release() }

// PrefixCache is an LRU of prefix key/value tensors bounded in bytes; V is
// the value type (the engine's *engine.Prefix), and it implements
// engine.PrefixStore for it. A
// record whose prefix is cached needs only its schema tokens computed (the
// schema follows the state, and causal attention makes the prefix's keys
// and values independent of what follows). It is safe for concurrent use;
// the zero budget disables it.
type PrefixCache[V any] struct {
	mu        sync.Mutex
	max, used int64
	ll        *list.List // front = most recently used
	items     map[PrefixKey]*list.Element

	hits, misses, evictions int64
}

type prefixEntry[V any] struct {
	key  PrefixKey
	val  V
	size int64
}

// entryOverhead is what the cache itself holds per entry besides the value:
// the key twice (in the map and in the entry), the entry, its list element
// and its share of the map's buckets (about 200 bytes on 64-bit, counted as
// 256). Put counts it with every value, so the budget bounds what the cache
// really holds.
const entryOverhead = 256

// NewPrefixCache returns a cache that holds at most maxBytes: its values
// (at the size Put is given) and its own bookkeeping (entryOverhead per
// entry).
func NewPrefixCache[V any](maxBytes int64) *PrefixCache[V] {
	if maxBytes < 0 {
		maxBytes = 0
	}
	return &PrefixCache[V]{max: maxBytes, ll: list.New(), items: map[PrefixKey]*list.Element{}}
}

// Enabled reports whether the cache may hold anything.
func (c *PrefixCache[V]) Enabled() bool { return c != nil && c.max > 0 }

// MaxBytes is the largest value the cache can keep (its budget less its
// own bookkeeping of one entry): the engine does not build a larger one.
func (c *PrefixCache[V]) MaxBytes() int64 {
	if c == nil {
		return 0
	}
	return max(0, c.max-entryOverhead)
}

// Contains reports whether key is cached, without counting a lookup or
// marking it used.
func (c *PrefixCache[V]) Contains(key PrefixKey) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[key]
	return ok
}

// Get returns the value cached under key and marks it most recently used.
func (c *PrefixCache[V]) Get(key PrefixKey) (V, bool) {
	if c == nil {
		var zero V
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		c.misses++
		var zero V
		return zero, false
	}
	c.hits++
	c.ll.MoveToFront(el)
	return el.Value.(*prefixEntry[V]).val, true
}

// Put caches val (size bytes, plus entryOverhead) under key, evicting the
// least recently used entries until it fits. A value larger than the whole
// budget is not cached (and released if it is a Releaser); Put reports
// whether it was kept. A value leaving the cache (evicted, replaced,
// cleared) is released.
func (c *PrefixCache[V]) Put(key PrefixKey, val V, size int64) bool {
	if c == nil || size < 0 || size > c.MaxBytes() {
		release(val)
		return false
	}
	size += entryOverhead
	var dropped []V
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*prefixEntry[V])
		if any(e.val) != any(val) {
			dropped = append(dropped, e.val)
		}
		c.used += size - e.size
		e.val, e.size = val, size
		c.ll.MoveToFront(el)
	} else {
		c.items[key] = c.ll.PushFront(&prefixEntry[V]{key: key, val: val, size: size})
		c.used += size
	}
	for c.used > c.max {
		back := c.ll.Back()
		e := back.Value.(*prefixEntry[V])
		c.ll.Remove(back)
		delete(c.items, e.key)
		c.used -= e.size
		c.evictions++
		dropped = append(dropped, e.val)
	}
	c.mu.Unlock()
	for _, v := range dropped {
		release(v)
	}
	return true
}

// Clear drops every entry (the model they belong to was unloaded).
func (c *PrefixCache[V]) Clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	var dropped []V
	for el := c.ll.Front(); el != nil; el = el.Next() {
		dropped = append(dropped, el.Value.(*prefixEntry[V]).val)
	}
	c.ll.Init()
	c.items = map[PrefixKey]*list.Element{}
	c.used = 0
	c.mu.Unlock()
	for _, v := range dropped {
		release(v)
	}
}

// Status reports the cache's size and counters.
func (c *PrefixCache[V]) Status() status.PrefixCache {
	if c == nil {
		return status.PrefixCache{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return status.PrefixCache{Bytes: c.used, MaxBytes: c.max, Entries: len(c.items),
		Hits: c.hits, Misses: c.misses, Evictions: c.evictions}
}

func release[V any](v V) {
	if r, ok := any(v).(Releaser); ok {
		r.Release()
	}
}
