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

// PrefixStore is what a model that reuses prefixes needs from the cache;
// *PrefixCache implements it. The model keys an entry by a content hash of
// its identity and of the token ids before the schema (system prompt, media,
// state), stores every layer's keys and values for those positions together
// with their final normed hidden rows (the joint head reads the hidden
// state of every position), and gives the entry's size in bytes.
type PrefixStore interface {
	Get(key [32]byte) (any, bool)
	Put(key [32]byte, val any, size int64) bool
}

var _ PrefixStore = (*PrefixCache)(nil)

// PrefixCache is an LRU of prefix key/value tensors bounded in bytes. A
// record whose prefix is cached needs only its schema tokens computed (the
// schema follows the state, and causal attention makes the prefix's keys
// and values independent of what follows). It is safe for concurrent use;
// the zero budget disables it.
type PrefixCache struct {
	mu        sync.Mutex
	max, used int64
	ll        *list.List // front = most recently used
	items     map[PrefixKey]*list.Element

	hits, misses, evictions int64
}

type prefixEntry struct {
	key  PrefixKey
	val  any
	size int64
}

// NewPrefixCache returns a cache that holds at most maxBytes of values.
func NewPrefixCache(maxBytes int64) *PrefixCache {
	if maxBytes < 0 {
		maxBytes = 0
	}
	return &PrefixCache{max: maxBytes, ll: list.New(), items: map[PrefixKey]*list.Element{}}
}

// Enabled reports whether the cache may hold anything.
func (c *PrefixCache) Enabled() bool { return c != nil && c.max > 0 }

// MaxBytes is the cache's budget: the engine does not build an entry larger
// than this (it could never be stored).
func (c *PrefixCache) MaxBytes() int64 {
	if c == nil {
		return 0
	}
	return c.max
}

// Get returns the value cached under key and marks it most recently used.
func (c *PrefixCache) Get(key PrefixKey) (any, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		c.misses++
		return nil, false
	}
	c.hits++
	c.ll.MoveToFront(el)
	return el.Value.(*prefixEntry).val, true
}

// Put caches val (size bytes) under key, evicting the least recently used
// entries until it fits. A value larger than the whole budget is not cached
// (and released if it is a Releaser); Put reports whether it was kept.
func (c *PrefixCache) Put(key PrefixKey, val any, size int64) bool {
	if c == nil || size < 0 || size > c.max {
		release(val)
		return false
	}
	var dropped []any
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*prefixEntry)
		if e.val != val {
			dropped = append(dropped, e.val)
		}
		c.used += size - e.size
		e.val, e.size = val, size
		c.ll.MoveToFront(el)
	} else {
		c.items[key] = c.ll.PushFront(&prefixEntry{key: key, val: val, size: size})
		c.used += size
	}
	for c.used > c.max {
		back := c.ll.Back()
		e := back.Value.(*prefixEntry)
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
func (c *PrefixCache) Clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	var dropped []any
	for el := c.ll.Front(); el != nil; el = el.Next() {
		dropped = append(dropped, el.Value.(*prefixEntry).val)
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
func (c *PrefixCache) Status() status.PrefixCache {
	if c == nil {
		return status.PrefixCache{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return status.PrefixCache{Bytes: c.used, MaxBytes: c.max, Entries: len(c.items),
		Hits: c.hits, Misses: c.misses, Evictions: c.evictions}
}

func release(v any) {
	if r, ok := v.(Releaser); ok {
		r.Release()
	}
}
